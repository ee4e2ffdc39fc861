package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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

// ReadGenericBatchForTest is readGenericBatch with read reading the
// batch's middle statements.
func ReadGenericBatchForTest(br pgx.BatchResults, read func(pgx.BatchResults) error) error {
	_, err := readGenericBatch(br, func() (struct{}, error) { return struct{}{}, read(br) })
	return err
}

// ParseEligibleForTest is parseEligible.
func ParseEligibleForTest(payload string) (int, string) { return parseEligible(payload) }

// SetEligibleNotifyWindowForTest sets the least time between two
// fabric_eligible NOTIFYs of c's creates on one partition and lane.
func (c *Client) SetEligibleNotifyWindowForTest(d time.Duration) { c.eligible.window = d }
