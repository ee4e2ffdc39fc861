// Package pgsuite tests the Postgres scanner plugins and the sql_query
// host function end to end: real .wasm plugins (make plugins) in a real
// host on a real throwaway Postgres cluster.
package pgsuite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// parts keeps sweeps short: four flow partitions.
var parts = model.PartitionConfig{Flow: 4, Budget: 1, Quota: 1}

// ahead is how far the plugins' clock runs ahead of the client's, so every
// lease the test grants is already expired for the plugins.
const ahead = time.Hour

func newClient(t *testing.T) *postgres.Client {
	t.Helper()
	return pgtest.Client(t, postgres.ClientConfig{Partitions: parts})
}

// fixture returns the path of a built plugin.
func fixture(t *testing.T, name string) string {
	t.Helper()
	for _, p := range []string{
		filepath.Join("..", "..", "bin", "plugins", name+".wasm"),
		filepath.Join("..", "..", "testdata", "plugins", name+".wasm"),
	} {
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	t.Fatalf("%s.wasm is missing: run `make plugins` first", name)
	return ""
}

func cacheDir() string {
	if base, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(base, "fabric", "wazero")
		if os.MkdirAll(dir, 0o755) == nil {
			return dir
		}
	}
	return ""
}

// startHost runs a host on c's database with the named plugins and
// returns it with its signals; it is stopped when the test ends (or by
// the returned stop).
func startHost(t *testing.T, c *postgres.Client, plugins map[string]host.PluginConfig) (*host.Host, *host.TestSignals, func()) {
	t.Helper()
	return startHostAhead(t, c, plugins, ahead)
}

// startHostAhead is startHost with the plugins' clock ahead of the
// client's by skew (0: the real clock).
func startHostAhead(t *testing.T, c *postgres.Client, plugins map[string]host.PluginConfig, skew time.Duration) (*host.Host, *host.TestSignals, func()) {
	t.Helper()
	dir := t.TempDir()
	// The operator grants each plugin what it requests (sqltrap's
	// statements and 30 s timeout are beyond the stock policy).
	policy := host.StockPolicy()
	for name := range plugins {
		b, err := os.ReadFile(fixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		in, err := host.Inspect(context.Background(), fixture(t, name), host.InspectConfig{CacheDir: cacheDir()})
		if err != nil {
			t.Fatal(err)
		}
		policy.Plugins[in.Manifest.Name] = host.GrantOf(in.Manifest)
	}
	sig := &host.TestSignals{}
	sig.Init()
	h, err := host.New(host.Config{
		PluginDir: dir, CacheDir: cacheDir(), Postgres: c.PluginSQL(), Partitions: parts, Plugins: plugins,
		Logger: pgtest.Logger(), TestSignals: sig, QuarantineBase: time.Hour, Policy: &policy,
		Now: func(context.Context) (int64, error) { return time.Now().Add(skew).UnixMilli(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			h.Stop()
			h.Close(context.Background())
		}
	}
	t.Cleanup(stop)
	return h, sig, stop
}

// wait returns the next value of ch, failing the test after d.
func wait[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
	}
	var zero T
	return zero
}

func create(t *testing.T, c *postgres.Client, lane, policy string, delayUntil int64) model.ExecutionID {
	t.Helper()
	id := parts.NewSoloExecutionID(lane)
	if _, err := c.CreateExecution(context.Background(), &postgres.CreateExecutionParams{
		ExecutionID: id, Namespace: "ns", LaneID: lane, ExecutionKind: "test", PolicyJSON: policy, DelayUntil: delayUntil,
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

func claim(t *testing.T, c *postgres.Client, lane string) *postgres.ClaimResult {
	t.Helper()
	r, err := c.ClaimForWorker(context.Background(), &postgres.ClaimForWorkerParams{
		LaneID: lane, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 60_000})
	if err != nil {
		t.Fatalf("claim %s: %v", lane, err)
	}
	return r
}

// state is the exec_core tuple tests assert on ("" fields when the row is
// gone).
type state struct {
	Phase, Eligibility, Public, Attempt string
	Index                               int
}

func stateOf(t *testing.T, c *postgres.Client, id model.ExecutionID) state {
	t.Helper()
	var s state
	err := c.Pool().QueryRow(context.Background(), `SELECT lifecycle_phase, eligibility_state, public_state, attempt_state, attempt_index
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid`,
		int16(id.Partition().Index), id.UUIDString()).Scan(&s.Phase, &s.Eligibility, &s.Public, &s.Attempt, &s.Index)
	if err != nil && err.Error() != "no rows in result set" {
		t.Fatal(err)
	}
	return s
}

func count(t *testing.T, c *postgres.Client, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := c.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// snapshot is every row a plugin could have written, as text.
func snapshot(t *testing.T, c *postgres.Client) string {
	t.Helper()
	var s string
	err := c.Pool().QueryRow(context.Background(), `SELECT
  (SELECT COALESCE(string_agg(row_to_json(x)::text, ',' ORDER BY execution_id), '') FROM ff_exec_core x) || '|' ||
  (SELECT COALESCE(string_agg(row_to_json(a)::text, ',' ORDER BY execution_id, attempt_index), '') FROM ff_attempt a) || '|' ||
  (SELECT count(*) FROM ff_completion_event)::text || '|' ||
  (SELECT count(*) FROM ff_lease_event)::text`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSQLRollback: a plugin that writes inside its transaction and then
// traps, overruns its deadline, or returns without committing leaves the
// database exactly as it was.
func TestSQLRollback(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	// Its attempt's deadline (a minute from the claim) has passed for the
	// plugins' clock, so the attempt-timeout scan finds it.
	id := create(t, c, "trap", `{"timeout_policy":{"attempt_timeout_ms":60000}}`, 0)
	claim(t, c, "trap")
	before := snapshot(t, c)
	part := int(id.Partition().Index)

	for _, tc := range []struct {
		mode    string
		timeout time.Duration
		fault   string
	}{
		{mode: "forget"},
		{mode: "loop", timeout: 300 * time.Millisecond, fault: "timeout"},
		{mode: "trap", fault: "trap"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			_, sig, stop := startHost(t, c, map[string]host.PluginConfig{
				"sqltrap": {Interval: 100 * time.Millisecond, Timeout: tc.timeout, Config: map[string]string{"mode": tc.mode}},
			})
			if tc.fault != "" {
				st := wait(t, sig.Quarantined.C(), time.Minute, "quarantine")
				if len(st.Reason) < len(tc.fault) || st.Reason[:len(tc.fault)] != tc.fault {
					t.Fatalf("quarantined for %q, want %s", st.Reason, tc.fault)
				}
			} else {
				for {
					rec := wait(t, sig.PartitionDone.C(), time.Minute, "partition call")
					if rec.Error != "" {
						t.Fatalf("forget call failed: %s", rec.Error)
					}
					if rec.Partition == part && rec.Result.Acted == 1 {
						break // it wrote, returned, and never committed
					}
				}
			}
			stop()
			if after := snapshot(t, c); after != before {
				t.Fatalf("database changed by a %s plugin call:\nbefore %s\nafter  %s", tc.mode, before, after)
			}
		})
	}
}

// TestSQLSession checks the host's refusals through the same session type
// the host function uses.
func TestSQLSession(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, time.Minute)
	caps := &abi.Capabilities{SQL: pgsql.Grants(pgsql.AttemptTimeoutScan)}
	exec := func(s *hostfn.SQLSession, st abi.SQLStatement) error {
		_, err := s.Do(ctx, abi.SQLRequest{Statements: []abi.SQLStatement{st}})
		return err
	}
	t.Run("GrantedStatementRuns", func(t *testing.T) {
		s := hostfn.NewSQLSession(c.PluginSQL(), caps, "{fp:2}")
		if err := exec(s, pdk.Q(pgsql.AttemptTimeoutScan, 2, 0, 10)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("OtherPartitionIsRefused", func(t *testing.T) {
		s := hostfn.NewSQLSession(c.PluginSQL(), caps, "{fp:2}")
		if err := exec(s, pdk.Q(pgsql.AttemptTimeoutScan, 3, 0, 10)); !errors.Is(err, abi.CodeCrossPartition) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("StatementNotGrantedIsRefused", func(t *testing.T) {
		s := hostfn.NewSQLSession(c.PluginSQL(), caps, "")
		if err := exec(s, pdk.Q(pgsql.LeaseExpiryScan, 2, 0, 10)); !errors.Is(err, abi.CodeDenied) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("TableNotGrantedIsRefused", func(t *testing.T) {
		// The statement is granted but one of its tables is not.
		s := hostfn.NewSQLSession(c.PluginSQL(), &abi.Capabilities{SQL: []string{pgsql.AttemptTimeoutScan.Name, "table.ff_attempt"}}, "")
		if err := exec(s, pdk.Q(pgsql.AttemptTimeoutScan, 2, 0, 10)); !errors.Is(err, abi.CodeDenied) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("UnknownStatementAndBadArityAreBadRequests", func(t *testing.T) {
		s := hostfn.NewSQLSession(c.PluginSQL(), &abi.Capabilities{SQL: []string{"drop.everything"}}, "")
		if err := exec(s, abi.SQLStatement{Name: "drop.everything"}); !errors.Is(err, abi.CodeBadRequest) {
			t.Fatalf("err = %v", err)
		}
		s = hostfn.NewSQLSession(c.PluginSQL(), caps, "")
		if err := exec(s, pdk.Q(pgsql.AttemptTimeoutScan, 2)); !errors.Is(err, abi.CodeBadRequest) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("FailedStatementRollsBackTheBatch", func(t *testing.T) {
		id := create(t, c, "batch", "", 0)
		all := &abi.Capabilities{SQL: pgsql.Grants(pgsql.All...)}
		s := hostfn.NewSQLSession(c.PluginSQL(), all, "")
		pk, eid := int64(id.Partition().Index), id.UUIDString()
		_, err := s.Do(ctx, abi.SQLRequest{Statements: []abi.SQLStatement{
			pdk.Q(pgsql.ExecCoreExpireAfterTimeout, pk, eid, 1),
			pdk.Q(pgsql.LeaseEventInsert, "not-a-uuid", "expired", 1, pk), // fails: bad uuid
		}})
		if !errors.Is(err, abi.CodeBackend) {
			t.Fatalf("err = %v", err)
		}
		if st := stateOf(t, c, id); st.Phase != "runnable" {
			t.Fatalf("first statement of a failed batch committed: %+v", st)
		}
	})
}

// TestAttemptTimeoutPlugin: the pg_attempt_timeout plugin retries an
// attempt past its own deadline (timeout_policy.attempt_timeout_ms from
// the claim), then expires the execution when its retries are exhausted
// and emits the completion event a LISTENing dispatcher receives. An
// attempt without a timeout whose lease ran out is left alone (the lease
// is pg_lease_expiry's, and leads to a reclaim).
func TestAttemptTimeoutPlugin(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	sub, err := c.SubscribeCompletions(ctx, &postgres.SubscribeCompletionsParams{AfterEventID: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	id := create(t, c, "at", `{"retry_policy":{"max_retries":1},"timeout_policy":{"attempt_timeout_ms":60000}}`, 0)
	first := claim(t, c, "at")
	untimed := create(t, c, "at-none", "", 0)
	claim(t, c, "at-none")

	startHost(t, c, map[string]host.PluginConfig{"pg_attempt_timeout": {Interval: 100 * time.Millisecond}})
	pgtest.Eventually(t, time.Minute, "timed-out attempt retried", func() bool {
		return stateOf(t, c, id) == state{"runnable", "eligible_now", "waiting", "pending_retry_attempt", 1}
	})
	if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND attempt_index = 0
 AND outcome = 'interrupted' AND lease_expires_at_ms IS NULL`, id.UUIDString()); n != 1 {
		t.Fatal("timed-out attempt not interrupted")
	}
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: first.Fence()}); !errors.Is(err, postgres.CodeStaleLease) {
		t.Fatalf("the timed-out worker was not fenced out: %v", err)
	}

	second := claim(t, c, "at")
	if second.AttemptIndex != 1 || second.AttemptType != "retry" {
		t.Fatalf("retry claim %+v", second)
	}
	ev := wait(t, sub.C, time.Minute, "completion event")
	if ev.ExecutionID != id || ev.Outcome != model.OutcomeExpired {
		t.Fatalf("event %+v, want %s expired", ev, id)
	}
	if st := stateOf(t, c, id); st != (state{"terminal", "not_applicable", "expired", "attempt_terminal", 1}) {
		t.Fatalf("after exhaustion: %+v", st)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'expired'`, id.UUIDString()); n != 2 {
		t.Fatalf("%d expired lease events, want 2", n)
	}
	// The plugin swept the untimed execution's partition for as long (its
	// lease expired an hour ago by the plugin's clock): still running.
	if st := stateOf(t, c, untimed); st != (state{"active", "not_applicable", "running", "running_attempt", 0}) {
		t.Fatalf("an attempt without a timeout timed out on its lease: %+v", st)
	}
}

// TestScannerPlugins runs the other Postgres scanners together on one
// database: lease expiry, delayed and submitted promotion (the upstream
// gaps), suspension timeout, retention.
func TestScannerPlugins(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := c.Pool()
	now := time.Now().UnixMilli()

	leased := create(t, c, "le", "", 0)
	claim(t, c, "le")
	delayed := create(t, c, "dl", "", now+10*60_000) // due within the plugins' hour ahead
	notDue := create(t, c, "dl2", "", now+2*3600_000)
	submitted := create(t, c, "sb", "", 0)
	if _, err := pool.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'submitted' WHERE execution_id = $1::uuid`, submitted.UUIDString()); err != nil {
		t.Fatal(err)
	}
	suspend := func(lane, behavior string, suspended bool) model.ExecutionID {
		id := create(t, c, lane, "", 0)
		phase := "runnable" // resumed: the suspension row outlived it (upstream's deliver_signal)
		if suspended {
			phase = "suspended"
		}
		if _, err := pool.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = $2 WHERE execution_id = $1::uuid`, id.UUIDString(), phase); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms,
  timeout_at_ms, condition, timeout_behavior) VALUES ($1, $2::uuid, gen_random_uuid(), $3, $4, '{}', $5)`,
			int16(id.Partition().Index), id.UUIDString(), now, now+60_000, behavior); err != nil {
			t.Fatal(err)
		}
		return id
	}
	cancelled := suspend("su", "cancel", true)
	resumed := suspend("su2", "fail", false)
	old := create(t, c, "rt", "", 0)
	r := claim(t, c, "rt")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: old, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ff_exec_core SET terminal_at_ms = 1 WHERE execution_id = $1::uuid`, old.UUIDString()); err != nil {
		t.Fatal(err)
	}

	every := host.PluginConfig{Interval: 100 * time.Millisecond}
	h, _, _ := startHost(t, c, map[string]host.PluginConfig{
		"pg_lease_expiry": every, "pg_delayed_promoter": every, "pg_suspension_timeout": every, "pg_retention": every,
		"delayed_promoter": every, // a Valkey plugin: loads disabled on a Postgres-only host
	})

	t.Run("ValkeyPluginDisabled", func(t *testing.T) {
		<-h.Started()
		st, ok := h.Plugin("delayed_promoter")
		if !ok || st.State != host.StateDisabled || st.Reason == "" {
			t.Fatalf("delayed_promoter on a Postgres-only host: %+v", st)
		}
		if st, _ := h.Plugin("pg_lease_expiry"); st.State != host.StateRunning {
			t.Fatalf("pg_lease_expiry: %+v", st)
		}
	})

	t.Run("LeaseExpiryMarksForReclaim", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "expired lease marked", func() bool {
			return stateOf(t, c, leased) == state{"active", "not_applicable", "running", "attempt_interrupted", 0}
		})
		rs, err := c.Reclaim(ctx, &backend.ClaimNextParams{LaneID: "le", WorkerID: "w2", WorkerInstanceID: "wi2",
			LeaseTTLMs: 60_000, Partitions: []uint16{parts.SoloPartition("le").Index}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].ExecutionID != leased || rs[0].AttemptType != "reclaim" || rs[0].AttemptIndex != 1 || rs[0].LeaseEpoch != 2 {
			t.Fatalf("reclaim %+v", rs)
		}
	})
	t.Run("DelayedPromotedWhenDue", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "delayed promoted", func() bool {
			return stateOf(t, c, delayed).Eligibility == "eligible_now"
		})
		if st := stateOf(t, c, notDue); st.Eligibility != "not_eligible_until_time" {
			t.Fatalf("not-yet-due execution promoted: %+v", st)
		}
	})
	t.Run("SubmittedBecomesRunnable", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "submitted promoted", func() bool { return stateOf(t, c, submitted).Phase == "runnable" })
		if r := claim(t, c, "sb"); r.ExecutionID != submitted {
			t.Fatalf("claimed %s", r.ExecutionID)
		}
	})
	t.Run("SuspensionTimeout", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "suspension timed out", func() bool { return stateOf(t, c, cancelled).Phase == "terminal" })
		if st := stateOf(t, c, cancelled); st.Public != "cancelled" {
			t.Fatalf("%+v", st)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'cancelled'`, cancelled.UUIDString()); n != 1 {
			t.Fatalf("%d cancelled completion events", n)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_suspension_current WHERE execution_id = $1::uuid`, cancelled.UUIDString()); n != 0 {
			t.Fatal("suspension row kept")
		}
		// The resumed execution is left alone; only its stale timeout goes.
		pgtest.Eventually(t, time.Minute, "stale timeout cleared", func() bool {
			return count(t, c, `SELECT count(*) FROM ff_suspension_current WHERE execution_id = $1::uuid AND timeout_at_ms IS NULL`, resumed.UUIDString()) == 1
		})
		if st := stateOf(t, c, resumed); st.Phase != "runnable" {
			t.Fatalf("resumed execution terminated: %+v", st)
		}
	})
	t.Run("RetentionTrimsOldTerminal", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "old execution trimmed", func() bool { return stateOf(t, c, old).Phase == "" })
		for _, table := range []string{"ff_attempt", "ff_completion_event"} {
			if n := count(t, c, `SELECT count(*) FROM `+table+` WHERE execution_id = $1::uuid`, old.UUIDString()); n != 0 {
				t.Fatalf("%d %s rows left", n, table)
			}
		}
		if n := count(t, c, `SELECT count(*) FROM ff_lease_event WHERE execution_id = $1`, old.UUIDString()); n != 0 {
			t.Fatalf("%d lease events left", n)
		}
		if st := stateOf(t, c, cancelled); st.Phase != "terminal" {
			t.Fatal("a recent terminal execution was trimmed")
		}
	})
}
