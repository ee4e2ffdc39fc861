package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CompleteBatchForTest writes ps as ONE group-commit batch (the flush a
// group of concurrent CompleteExecution calls shares) and returns each
// item's outcome.
func (c *Client) CompleteBatchForTest(ctx context.Context, ps []*CompleteExecutionParams) []error {
	rs := make([]*completeReq, len(ps))
	for i, p := range ps {
		k, err := splitExecID(p.ExecutionID)
		if err != nil {
			panic(err)
		}
		rs[i] = &completeReq{ctx: ctx, k: k, p: p, done: make(chan error, 1)}
	}
	c.flushCompleteBatch(rs)
	out := make([]error, len(rs))
	for i, r := range rs {
		out[i] = <-r.done
	}
	return out
}

// SQLClaimPlansForTest is sqlClaimPlans, the first statement of a claim's
// pipeline.
const SQLClaimPlansForTest = sqlClaimPlans

// ReadGenericBatchForTest is readGenericBatch with read reading the
// statements after the batch's first.
func ReadGenericBatchForTest(br pgx.BatchResults, read func(pgx.BatchResults) error) error {
	_, err := readGenericBatch(br, func() (struct{}, error) { return struct{}{}, read(br) })
	return err
}

// ParseEligibleForTest is parseEligible.
func ParseEligibleForTest(payload string) (int, string) { return parseEligible(payload) }

// SetEligibleNotifyWindowForTest sets the least time between two
// fabric_eligible NOTIFYs of c's creates on one partition and lane.
func (c *Client) SetEligibleNotifyWindowForTest(d time.Duration) { c.eligible.window = d }

// ClaimPlanForTest holds one connection with the claim of a lane's next
// executions on its solo partition prepared, as grantNext sends it (the
// literal statement, sorts off), and EXPLAINs its executions: under
// force_generic_plan, the generic plan the connection made at its first
// execution and keeps until something invalidates it.
type ClaimPlanForTest struct {
	conn *pgxpool.Conn
	lane string
}

// NewClaimPlanForTest prepares the claim of lane on a connection of c's
// pool, under generic or custom plans.
func NewClaimPlanForTest(ctx context.Context, c *Client, lane string, generic bool) (*ClaimPlanForTest, error) {
	text, literal := c.hot.text(sqlGrantNext, int16(c.parts.SoloPartition(lane).Index))
	if !literal {
		return nil, errors.New("no literal claim text")
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	for _, q := range []string{"SET enable_sort = off", "SET plan_cache_mode = " + mode, "PREPARE claim_plan_for_test AS " + text} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Release()
			return nil, err
		}
	}
	return &ClaimPlanForTest{conn: conn, lane: lane}, nil
}

// Explain returns the plan of the prepared claim's next execution.
func (p *ClaimPlanForTest) Explain(ctx context.Context) (string, error) {
	rows, err := p.conn.Query(ctx, "EXPLAIN EXECUTE claim_plan_for_test('w', 'wi', 1, 1, '"+p.lane+"', '{}', 4)")
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// Close deallocates the claim and gives the connection back, its settings
// reset.
func (p *ClaimPlanForTest) Close() {
	ctx := context.Background()
	_, _ = p.conn.Exec(ctx, "DEALLOCATE claim_plan_for_test")
	_, _ = p.conn.Exec(ctx, "RESET ALL")
	p.conn.Release()
}

// NewDriverFullSweepForTest is NewDriver whose claimers' scans read every
// partition every n-th scan (fullSweepEvery).
func NewDriverFullSweepForTest(c *Client, n int) *Driver { return &Driver{c: c, fullSweepEvery: n} }
