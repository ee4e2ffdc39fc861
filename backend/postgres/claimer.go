package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// fullScanInterval is how often a claimer looks for eligible work of its
// lanes on every partition, not only the lanes' solo partitions and the
// notified ones: for flow members no notification named (created before
// the worker listened, beyond the notified bound, lost in a reconnect) or,
// without notifications, for every flow member.
const fullScanInterval = time.Second

// fullSweepEvery is how many scans apart the claimer's scan reads every
// partition, the statistics notwithstanding (sqlChildrenInUse): a server
// that crashed (kill -9, power loss) restarts with its statistics
// discarded, and a partition whose rows all predate the crash reads as
// never used — an eligible flow member there, its notification lost in
// the restart, would never be claimed. The first such sweep opens every
// partition once in the scan's session (the cost the statistics save at
// a worker's start); later ones are index probes like any scan's.
const fullSweepEvery = 30

// findWorkSQL returns the statement that names which of lanes $1 hold
// eligible work (required capabilities within $2) on partition part: one
// probe of the claim index per lane. The partition is a literal, so each
// text plans one child (a statement over every partition would plan all
// 256 children: 0.2 s idle, over a second under load); it reads and locks
// no row.
func findWorkSQL(part int) string {
	return `SELECT l FROM unnest($1::text[]) AS l
 WHERE EXISTS (SELECT 1 FROM ff_exec_core e
                WHERE e.partition_key = ` + strconv.Itoa(part) + `::smallint AND e.lane_id = l
                  AND e.lifecycle_phase = 'runnable' AND e.eligibility_state = 'eligible_now'
                  AND e.required_capabilities <@ $2::text[])`
}

// Claimer is the Postgres claim session of one worker (backend.Claimer):
// a claim is one ClaimNextN statement per lane and place, a completion is
// the group-committed CompleteExecution, and Wake is LISTEN
// fabric_eligible or the claimer's own scan finding work. Create it with
// Driver.NewClaimer.
type Claimer struct {
	d     *Driver
	cfg   backend.ClaimerConfig
	parts model.PartitionConfig
	log   *slog.Logger
	rr    atomic.Uint64 // lane rotation
	// places is where work was notified or found beyond the solo
	// partitions: the subscription's, or the claimer's own without one.
	places *workPlaces
	sub    *EligibleSubscription
	// The scan for work on every partition runs in the background, on a
	// connection of its own: stopScan ends it, scanDone closes after.
	stopScan context.CancelFunc
	scanDone chan struct{}
	// The scan goroutine's: findWorkSQL by partition key, and the keys
	// each of ff_exec_core's hash partitions holds.
	findSQL   map[int]string
	childKeys map[int][]int
	// analyzed: the lanes' solo children the scan has seen analyzed
	// (analyzeFresh), or gave up on.
	analyzed map[string]bool
	// scans counts the scans; every fullSweep-th reads every partition
	// (fullSweepEvery; tests set it lower).
	scans, fullSweep int
	once             sync.Once
	// reclaimMu guards reclaimAt, when the last reclaim pass ran, and
	// reclaimCursor, the first flow partition of the next pass's window.
	reclaimMu     sync.Mutex
	reclaimAt     time.Time
	reclaimCursor int
}

var _ backend.Claimer = (*Claimer)(nil)

// NewClaimer implements backend.ClaimerDriver. With cfg.Notifications it
// LISTENs for eligible work of the lanes (SubscribeEligible); a LISTEN
// that fails is logged and the worker polls only. Either way a background
// scan looks at every partition once per fullScanInterval (the first at
// once), on a connection of its own outside the pool.
func (d *Driver) NewClaimer(ctx context.Context, cfg *backend.ClaimerConfig) (backend.Claimer, error) {
	if cfg == nil || cfg.WorkerID == "" || cfg.WorkerInstanceID == "" || len(cfg.Lanes) == 0 || cfg.LeaseTTLMs <= 0 {
		return nil, fmt.Errorf("%w: new claimer: a worker id, an instance id, lanes and lease_ttl_ms > 0 are required", backend.ErrInvalidInput)
	}
	c := &Claimer{d: d, cfg: *cfg, parts: d.c.Partitions(), log: cmp.Or(cfg.Logger, slog.Default()), places: newWorkPlaces(),
		fullSweep: cmp.Or(d.fullSweepEvery, fullSweepEvery)}
	c.cfg.Lanes = slices.Clone(cfg.Lanes)
	if cfg.Notifications {
		sub, err := d.c.SubscribeEligible(ctx, cfg.Lanes)
		if err != nil {
			c.log.Warn("eligible-work notifications unavailable; polling only", "error", err)
		} else {
			c.sub, c.places = sub, sub.places
		}
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stopScan, c.scanDone = stop, make(chan struct{})
	go c.scanLoop(sctx)
	return c, nil
}

// scanLoop finds eligible work of the lanes on every partition once per
// fullScanInterval and notes where (waking the worker when it found
// any), so that Claim claims there with the one-partition statement. A
// Claim never waits for a scan, which costs a pipelined index probe per
// partition and lane.
func (c *Claimer) scanLoop(ctx context.Context) {
	defer close(c.scanDone)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	caps := c.cfg.Capabilities
	if caps == nil {
		caps = []string{}
	}
	failing := false
	for {
		found, err := c.scan(ctx, &conn, caps)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing { // once per outage, not once per second
				c.log.Warn("claimer: scan for eligible work failed; retrying", "error", err)
			}
			failing = true
			if conn != nil {
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
			}
		default:
			failing = false
			c.analyzeFresh(ctx, conn)
			for _, w := range found {
				if w.Partition != c.parts.SoloPartition(w.Lane).Index { // Claim tries those first anyway
					c.places.note(w)
				}
			}
			if len(found) > 0 {
				c.places.signal()
			}
		}
		if !sleepCtx(ctx, fullScanInterval) {
			return
		}
	}
}

// freshAnalyzeRows is how many rows a lane's solo partition has taken
// (inserted, by the statistics) before the claimer analyzes it, when
// nothing has yet.
const freshAnalyzeRows = 100

// freshAnalyzeColumns are the columns analyzeFresh analyzes, of
// ff_exec_core's children (false) and ff_attempt's (true): those the hot
// path's statements filter, join and order by. The wide ones (payload,
// result, raw_fields, policy) are left to autovacuum's full ANALYZE:
// measured on a 6,000-row child, 72–91 ms for every column against 36
// ms for these (ff_attempt's 20 ms against 6 ms).
var freshAnalyzeColumns = map[bool]string{
	false: " (partition_key, execution_id, lane_id, lifecycle_phase, eligibility_state, required_capabilities, priority, created_at_ms, attempt_index)",
	true:  " (partition_key, execution_id, attempt_index, lease_epoch, lease_expires_at_ms, worker_id)",
}

// sqlFreshChildren names which of the tables $1 (in ff_exec_core's
// schema) no ANALYZE, manual or automatic, has visited since they took
// $2 rows, among those the session may analyze (its role owns them, or is
// a superuser: for any other, ANALYZE skips the table with a warning).
const sqlFreshChildren = `SELECT c.relname::text FROM pg_class c
 WHERE c.relname = ANY($1::text[])
   AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'ff_exec_core'::regclass)
   AND (pg_has_role(c.relowner, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
   AND pg_stat_get_last_analyze_time(c.oid) IS NULL AND pg_stat_get_last_autoanalyze_time(c.oid) IS NULL
   AND pg_stat_get_tuples_inserted(c.oid) >= $2`

// analyzeFresh analyzes the children of ff_exec_core and ff_attempt that
// hold the lanes' solo partitions once they took freshAnalyzeRows rows
// and nothing analyzed them yet. A fresh partition's statistics say it is
// empty until autovacuum gets to it — on a server with several databases
// that can take longer than a whole burst of work — and the plans made
// under them (kept as generic plans by every connection) read the claimed
// rows' whole partition to update them, a scan per claim that grows with
// the partition. ANALYZE ends those plans (it invalidates them). Tables
// the session's role may not analyze are left to autovacuum; an ANALYZE
// that fails is logged once and not tried again.
func (c *Claimer) analyzeFresh(ctx context.Context, conn *pgx.Conn) {
	if conn == nil {
		return
	}
	var names []string
	for _, lane := range c.cfg.Lanes {
		// The child the hot statements name (hotPlans.childOf: checked
		// against FlowFabric's layout, asked once per partition);
		// ff_attempt is hashed as ff_exec_core is, so the same remainder
		// names both. Another layout is left to autovacuum.
		r, ok, err := c.d.c.hot.childOf(int16(c.parts.SoloPartition(lane).Index))
		if err != nil || !ok {
			continue
		}
		for _, t := range hotTables {
			if n := t + "_p" + strconv.Itoa(r); !c.analyzed[n] && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	rows, err := conn.Query(ctx, sqlFreshChildren, names, freshAnalyzeRows)
	if err != nil {
		return // the scan's own statements report a broken connection
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(fresh) == 0 {
		return
	}
	idents := make([]string, len(fresh))
	for i, n := range fresh {
		idents[i] = pgx.Identifier{n}.Sanitize() + freshAnalyzeColumns[strings.HasPrefix(n, "ff_attempt_")]
	}
	if c.analyzed == nil {
		c.analyzed = map[string]bool{}
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, "ANALYZE "+strings.Join(idents, ", ")); err != nil {
		c.log.Info("claimer: could not analyze the lanes' fresh partitions; their plans wait for autovacuum", "tables", fresh, "error", err)
	} else {
		c.log.Debug("claimer: analyzed the lanes' fresh partitions", "tables", fresh, "took", time.Since(start))
	}
	for _, n := range fresh {
		c.analyzed[n] = true
	}
}

// sqlChildKeys maps ff_exec_core's hash partitions (256, by
// partition_key: FlowFabric's schema) to the partition keys 0..$1-1 each
// holds.
const sqlChildKeys = `SELECT r, k FROM generate_series(0, $1::int - 1) AS k, generate_series(0, 255) AS r
 WHERE satisfies_hash_partition('ff_exec_core'::regclass, 256, r, k::smallint)`

// sqlChildrenInUse names the partitions of ff_exec_core that hold, or
// ever held, a row by the statistics — with $1, every partition: a scan
// skips the others without opening them (the first look at a partition
// costs a backend several ms of catalog reads; at every worker start, 256
// of them were 0.2-1 s of server CPU). Statistics trail the writes by up
// to some seconds, so new work on a partition in use for the first time
// is found a few seconds later by the scan (a notification finds it at
// once). A crash discards the statistics: a row updated since (work
// promoted, released, reclaimed) brings its partition back, and the full
// sweep (fullSweepEvery) finds the rest.
const sqlChildrenInUse = `SELECT substr(relname, 15)::int FROM pg_class
 WHERE relname >= 'ff_exec_core_p' AND relname < 'ff_exec_core_q' AND relname ~ '^ff_exec_core_p[0-9]+$'
   AND relkind = 'r' AND relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'ff_exec_core'::regclass)
   AND ($1::bool OR pg_stat_get_live_tuples(oid) > 0 OR pg_stat_get_tuples_inserted(oid) > 0
        OR pg_stat_get_tuples_updated(oid) > 0)`

// scan runs findWorkSQL for every partition in use (sqlChildrenInUse),
// pipelined in one round trip, on *conn, dialling it first when nil. The
// session keeps each statement prepared with its (one-child) generic
// plan, so a scan after the first plans nothing new.
func (c *Claimer) scan(ctx context.Context, conn **pgx.Conn, caps []string) ([]NotifiedWork, error) {
	if *conn == nil {
		cn, err := c.d.c.dialSession(ctx, "SET plan_cache_mode = force_generic_plan")
		if err != nil {
			return nil, fmt.Errorf("claimer scan: %w", err)
		}
		*conn = cn
	}
	if c.childKeys == nil {
		m := map[int][]int{}
		rows, err := (*conn).Query(ctx, sqlChildKeys, int(c.parts.Flow))
		if err != nil {
			return nil, fmt.Errorf("claimer scan: partition keys: %w", notMigrated(err))
		}
		for rows.Next() {
			var r, k int
			if err := rows.Scan(&r, &k); err != nil {
				rows.Close()
				return nil, fmt.Errorf("claimer scan: partition keys: %w", err)
			}
			m[r] = append(m[r], k)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("claimer scan: partition keys: %w", notMigrated(err))
		}
		c.childKeys = m
	}
	var keys []int
	c.scans++
	rows, err := (*conn).Query(ctx, sqlChildrenInUse, c.scans%c.fullSweep == 0)
	if err != nil {
		return nil, fmt.Errorf("claimer scan: partitions in use: %w", err)
	}
	for rows.Next() {
		var r int
		if err := rows.Scan(&r); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claimer scan: partitions in use: %w", err)
		}
		keys = append(keys, c.childKeys[r]...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claimer scan: partitions in use: %w", err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys)
	if c.findSQL == nil {
		c.findSQL = map[int]string{}
	}
	b := &pgx.Batch{}
	for _, k := range keys {
		q, ok := c.findSQL[k]
		if !ok {
			q = findWorkSQL(k)
			c.findSQL[k] = q
		}
		b.Queue(q, c.cfg.Lanes, caps)
	}
	br := (*conn).SendBatch(ctx, b)
	var out []NotifiedWork
	for _, p := range keys {
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return nil, fmt.Errorf("claimer scan (partition %d): %w", p, notMigrated(err))
		}
		for rows.Next() {
			var lane string
			if err := rows.Scan(&lane); err != nil {
				rows.Close()
				br.Close()
				return nil, fmt.Errorf("claimer scan (partition %d): %w", p, err)
			}
			out = append(out, NotifiedWork{Partition: uint16(p), Lane: lane})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			br.Close()
			return nil, fmt.Errorf("claimer scan (partition %d): %w", p, notMigrated(err))
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("claimer scan: %w", notMigrated(err))
	}
	return out, nil
}

// Claim implements backend.Claimer: each lane is tried once, from a
// rotating lane, until n are claimed; on a lane's solo partition the n
// are picked and leased in one statement (ClaimNextN). Then the places
// LISTEN fabric_eligible named for the lanes, or the background scan
// found (flow members, which live on their flow's partition), each a
// ClaimNextN there. A place that gave all it was asked for is kept for
// the next call: there may be more.
func (c *Claimer) Claim(ctx context.Context, n int) ([]*backend.ClaimResult, error) {
	n = max(n, 1)
	out, err := c.reclaimDue(ctx, n)
	if err != nil {
		return out, err
	}
	n -= len(out)
	if n <= 0 {
		return out, nil
	}
	lanes := c.cfg.Lanes
	start := c.rr.Add(1)
	claim := func(lane string, part uint16) ([]*backend.ClaimResult, error) {
		return c.d.ClaimNextN(ctx, &backend.ClaimNextParams{LaneID: lane, WorkerID: c.cfg.WorkerID,
			WorkerInstanceID: c.cfg.WorkerInstanceID, Capabilities: c.cfg.Capabilities, LeaseTTLMs: c.cfg.LeaseTTLMs,
			Partitions: []uint16{part}}, n)
	}
	for i := range lanes {
		if n <= 0 {
			return out, nil
		}
		lane := lanes[(start+uint64(i))%uint64(len(lanes))]
		crs, err := claim(lane, c.parts.SoloPartition(lane).Index)
		if err != nil {
			return out, err
		}
		n, out = n-len(crs), append(out, crs...)
	}
	ws := c.places.take()
	for i, w := range ws {
		if n <= 0 {
			c.places.note(w) // not reached: next time
			continue
		}
		if w.Partition == c.parts.SoloPartition(w.Lane).Index {
			continue // the solo pass read it
		}
		crs, err := claim(w.Lane, w.Partition)
		if err != nil {
			for _, rest := range ws[i:] { // this one and those not reached: next time
				c.places.note(rest)
			}
			return out, err
		}
		if len(crs) == n {
			c.places.note(w) // there may be more
		}
		n, out = n-len(crs), append(out, crs...)
	}
	return out, nil
}

// reclaimEvery is how often Claim runs a reclaim pass (reclaimDue), as
// the Valkey claimer does.
const reclaimEvery = time.Second

// reclaimWindow is how many partitions beyond the lanes' solo partitions
// one reclaim pass reads (flow members live on their flow's partition):
// every partition is read within Flow/reclaimWindow passes.
const reclaimWindow = 32

// reclaimDue is the session's reclaim pass, at most once per
// reclaimEvery and unless DisableReclaim: it takes over up to n expired
// or revoked leases of the lanes (Client.Reclaim: a new "reclaim"
// attempt each, a lease no scanner marked yet included) on the lanes'
// solo partitions and the next window of reclaimWindow partitions.
func (c *Claimer) reclaimDue(ctx context.Context, n int) ([]*backend.ClaimResult, error) {
	if c.cfg.DisableReclaim {
		return nil, nil
	}
	now := c.cfg.Clock
	t := time.Now()
	if now != nil {
		t = now()
	}
	c.reclaimMu.Lock()
	if !c.reclaimAt.IsZero() && t.Sub(c.reclaimAt) < reclaimEvery && !t.Before(c.reclaimAt) {
		c.reclaimMu.Unlock()
		return nil, nil
	}
	c.reclaimAt = t
	flow := int(c.parts.Flow)
	start := c.reclaimCursor
	c.reclaimCursor = (start + reclaimWindow) % max(flow, 1)
	c.reclaimMu.Unlock()

	var window []uint16
	for i := range min(reclaimWindow, flow) {
		window = append(window, uint16((start+i)%flow))
	}
	var out []*backend.ClaimResult
	for _, lane := range c.cfg.Lanes {
		if n <= 0 {
			break
		}
		parts := append([]uint16{c.parts.SoloPartition(lane).Index}, window...)
		rs, err := c.d.c.Reclaim(ctx, &backend.ClaimNextParams{LaneID: lane, WorkerID: c.cfg.WorkerID,
			WorkerInstanceID: c.cfg.WorkerInstanceID, Capabilities: c.cfg.Capabilities, LeaseTTLMs: c.cfg.LeaseTTLMs,
			Partitions: parts}, n)
		if err != nil {
			return out, mapErr(err, false)
		}
		for _, r := range rs {
			out = append(out, claimOut(r))
		}
		n -= len(rs)
	}
	return out, nil
}

// CompleteAndClaim implements backend.Claimer: the completion alone
// (group-committed with other completions); it claims nothing, since the
// run loop frees the slot before the completion (FreesSlotBeforeEnd) and
// claims while it is in flight.
func (c *Claimer) CompleteAndClaim(ctx context.Context, p *backend.CompleteExecutionParams, _ int) ([]*backend.ClaimResult, error, error) {
	return nil, c.d.CompleteExecution(ctx, p), nil
}

// ClaimExecution implements backend.Claimer: Driver.ClaimExecution (one
// transaction, the row locked). lane is not needed.
func (c *Claimer) ClaimExecution(ctx context.Context, id model.ExecutionID, _ string) (*backend.ClaimResult, error) {
	return c.d.ClaimExecution(ctx, &backend.ClaimExecutionParams{ExecutionID: id, WorkerID: c.cfg.WorkerID,
		WorkerInstanceID: c.cfg.WorkerInstanceID, Capabilities: c.cfg.Capabilities, LeaseTTLMs: c.cfg.LeaseTTLMs})
}

// ResolveDependencies implements backend.Claimer: nothing, on Postgres
// the host's pg_dependency_reconciler resolves a flow member's edges,
// pushed by LISTEN ff_completion.
func (c *Claimer) ResolveDependencies(context.Context, model.ExecutionID, string) error { return nil }

// Wake implements backend.Claimer: with notifications, signalled by
// LISTEN fabric_eligible and by the background scan finding work; nil
// without.
func (c *Claimer) Wake() <-chan struct{} {
	if c.sub == nil {
		return nil // the worker polls; the scan's finds wait for its next Claim
	}
	return c.places.c
}

// NotificationsUp implements backend.Claimer. It is always false on
// Postgres: the LISTEN wakes an idle worker but the claim does not rely
// on it, and its health is not tracked.
func (c *Claimer) NotificationsUp() bool { return false }

// SweepRounds implements backend.Claimer: one Claim tries every lane.
func (c *Claimer) SweepRounds() int { return 1 }

// FreesSlotBeforeEnd implements backend.Claimer: true, lease-ending
// calls are group-committed, and the worker claims while they are in
// flight.
func (c *Claimer) FreesSlotBeforeEnd() bool { return true }

// SpreadPartitions implements backend.Claimer: none, lanes do not spread
// on Postgres.
func (c *Claimer) SpreadPartitions() []model.Partition { return nil }

// Close implements backend.Claimer: it ends the background scan and the
// LISTEN, and waits for both; it is safe to call more than once.
func (c *Claimer) Close() {
	c.once.Do(c.stopScan)
	<-c.scanDone
	if c.sub != nil {
		c.sub.Close()
	}
}

// LaneSpread implements backend.LaneSpreadDriver: always the default
// (lanes do not spread on Postgres).
func (d *Driver) LaneSpread(context.Context, string) (model.LaneSpread, error) {
	return model.LaneSpread{}, nil
}

// SetLaneSpread implements backend.LaneSpreadDriver: backend.ErrUnsupported.
func (d *Driver) SetLaneSpread(_ context.Context, lane string, _ model.LaneSpread) error {
	return fmt.Errorf("%w: lane spreading (lane %q) needs Valkey", backend.ErrUnsupported, lane)
}
