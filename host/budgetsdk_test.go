package host_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// meteredRun is what the metered workers saw: per execution, the status
// of its usage report and whether it completed.
type meteredRun struct {
	mu       sync.Mutex
	status   map[model.ExecutionID]string
	finished map[model.ExecutionID]bool
}

// handler reports tokens on budget for each job (deduplicated by
// execution id), as a worker metering an LLM call would; a hard breach
// fails the job permanently.
func (m *meteredRun) handler(c *valkey.Client, budget model.UUID, tokens int64) sdk.Handler {
	return func(ctx context.Context, j *sdk.Job) error {
		now, err := c.ServerTime(ctx)
		if err != nil {
			return err
		}
		r, err := c.ReportUsage(ctx, &valkey.ReportUsageParams{BudgetID: budget, NowMs: now, DedupID: string(j.ID),
			Deltas: []valkey.UsageDelta{{Dimension: "tokens", Delta: tokens}}})
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.status[j.ID] = r.Status
		m.mu.Unlock()
		if r.Status == valkey.BudgetHardBreach {
			return sdk.Permanent(fmt.Errorf("budget %s exhausted", budget))
		}
		m.mu.Lock()
		m.finished[j.ID] = true
		m.mu.Unlock()
		return nil
	}
}

func (m *meteredRun) done(ids []model.ExecutionID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		if !m.finished[id] {
			return false
		}
	}
	return true
}

func (m *meteredRun) statusOf(id model.ExecutionID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status[id]
}

// budgetOnOtherPartition returns a budget id whose partition under the
// host's 2 budget partitions differs from its partition under the default
// 32, so a plugin that routes budgets with the default count looks in the
// wrong place.
func budgetOnOtherPartition() model.UUID {
	for {
		id := model.NewUUID()
		if flowParts.BudgetPartition(id) != model.DefaultPartitionConfig().BudgetPartition(id) {
			return id
		}
	}
}

// A budget with a hard limit and a reset interval, end to end: SDK
// workers report usage until the budget is exhausted; further executions
// attached to it are blocked for budget at admission; the unblock scanner
// leaves them blocked while the budget is exhausted; the loaded
// budget_reset plugin resets it when its next_reset_at comes (and
// reschedules it); the unblock scanner then moves them back to eligible,
// and SDK workers complete them within the fresh budget. Every step is
// asserted from the keyspace.
//
// FlowFabric blocks for budget in its scheduler, before it issues a claim
// grant: a candidate whose exec_core.budget_ids names a budget at or over
// a hard limit goes to blocked:budget (ff_block_execution_for_admission,
// waiting_for_budget). fabric has no scheduler (SDK workers claim
// directly, as FlowFabric's SDK does, without admission), so the test
// plays the scheduler's admission step; and nothing in FlowFabric writes
// exec_core.budget_ids (datamodel trap 39), so the test attaches the
// executions itself, as FlowFabric's callers must.
func TestBudgetResetUnblocksOverLimitExecutionsEndToEnd(t *testing.T) {
	const (
		hard     = 30
		tokens   = 10
		interval = 4000 // ms: long enough that admission happens before the first reset
		lane     = "metered"
	)
	sweep := 100 * time.Millisecond
	e, client := setupSDKFlowEnv(t, flowOpts{plugins: []string{"budget_reset", "unblock"},
		config: map[string]host.PluginConfig{
			"budget_reset": {Interval: sweep},
			"unblock":      {Interval: sweep, Config: map[string]string{"lanes": lane}},
		}})
	raw := e.c.Raw()
	bid := budgetOnOtherPartition()
	bk := model.BudgetKeysFor(flowParts.BudgetPartition(bid), bid)
	now, err := e.c.ServerTime(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateBudget(e.ctx, &valkey.CreateBudgetParams{BudgetID: bid, ScopeType: "tenant", ScopeID: "acme",
		EnforcementMode: "strict", OnHardLimit: "block", OnSoftLimit: "warn", ResetIntervalMs: interval, NowMs: now,
		Dimensions: []valkey.BudgetDimension{{Name: "tokens", Hard: hard}}}); err != nil {
		t.Fatal(err)
	}
	firstReset := now + interval
	create := func(n int) []model.ExecutionID {
		t.Helper()
		var ids []model.ExecutionID
		for range n {
			id, err := client.CreateExecution(e.ctx, sdk.ExecutionSpec{Lane: lane, Kind: "llm.call"})
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.Do(e.ctx, raw.B().Hset().Key(model.KeysFor(id).Core()).FieldValue().
				FieldValue("budget_ids", bid.String()).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	usage := func() string { return e.hgetall(bk.Usage())["tokens"] }
	run := &meteredRun{status: map[model.ExecutionID]string{}, finished: map[model.ExecutionID]bool{}}
	worker := sdk.WorkerConfig{WorkerID: "metered", Lanes: []string{lane}, IdlePollMax: 20 * time.Millisecond}

	// 1. Workers spend the budget: three reports of 10 reach the hard
	// limit of 30 (a budget is exhausted at usage >= hard).
	spend := create(hard / tokens)
	stop := e.runWorkers(1, worker, run.handler(e.c, bid, tokens))
	// The handler returning is not the completion: wait for the outcome.
	valkeytest.Eventually(t, 30*time.Second, "first executions done", func() bool { return run.done(spend) && e.allSucceeded(spend) })
	stop()
	for _, id := range spend {
		if st := run.statusOf(id); st != valkey.BudgetOK {
			t.Fatalf("report of %s: %s", id, st)
		}
		if out := e.core(id, "terminal_outcome"); out != "success" {
			t.Fatalf("%s: terminal_outcome %q", id, out)
		}
	}
	if u := usage(); u != strconv.Itoa(hard) {
		t.Fatalf("usage after spending: %s, want %d", u, hard)
	}

	// 2. Admission, as FlowFabric's scheduler does it: the budget is at
	// its hard limit, so further executions are blocked for budget.
	blocked := create(3)
	for _, id := range blocked {
		if !e.budgetExhausted(bk) {
			t.Fatal("budget not exhausted at admission")
		}
		now, _ := e.c.ServerTime(e.ctx)
		if err := e.c.BlockExecutionForAdmission(e.ctx, id, "waiting_for_budget", "budget "+bid.String()+" exhausted", now); err != nil {
			t.Fatal(err)
		}
	}
	pk := func(id model.ExecutionID) model.PartitionKeys { return model.KeysOn(id.Partition()) }
	isBlocked := func(id model.ExecutionID) bool {
		return e.core(id, "eligibility_state") == "blocked_by_budget" && e.core(id, "blocking_reason") == "waiting_for_budget" &&
			e.core(id, "public_state") == "rate_limited" && e.zmember(pk(id).LaneBlockedBudget(lane), string(id)) &&
			!e.zmember(pk(id).LaneEligible(lane), string(id))
	}
	for _, id := range blocked {
		if !isBlocked(id) {
			t.Fatalf("%s not blocked for budget: %v", id, e.hgetall(model.KeysFor(id).Core()))
		}
	}

	// 3. While the budget stays exhausted, unblock sweeps leave them.
	sweeps := e.cycles("unblock")
	valkeytest.Eventually(t, 20*time.Second, "two full unblock sweeps after the block", func() bool { return e.cycles("unblock") >= sweeps+3 })
	if n := e.hgetall(bk.Definition())["reset_count"]; n != "" && n != "0" {
		t.Logf("the budget reset before the blocked check could run (reset_count %s): machine too slow for the %d ms interval", n, interval)
	} else {
		for _, id := range blocked {
			if !isBlocked(id) {
				t.Fatalf("%s unblocked while its budget is exhausted: %v", id, e.hgetall(model.KeysFor(id).Core()))
			}
		}
	}

	// 4. budget_reset resets it on schedule: not before next_reset_at,
	// usage zeroed, rescheduled one interval later.
	valkeytest.Eventually(t, 30*time.Second, "budget reset", func() bool {
		return e.hgetall(bk.Definition())["reset_count"] == "1" && usage() == "0"
	})
	def := e.hgetall(bk.Definition())
	last, _ := strconv.ParseInt(def["last_reset_at"], 10, 64)
	next, _ := strconv.ParseInt(def["next_reset_at"], 10, 64)
	if last < firstReset {
		t.Fatalf("reset at %d, before its schedule %d", last, firstReset)
	}
	if next != last+interval {
		t.Fatalf("next_reset_at %d, want %d", next, last+interval)
	}
	if s, err := raw.Do(e.ctx, raw.B().Zscore().Key(bk.Resets()).Member(bid.String()).Build()).AsFloat64(); err != nil || int64(s) != next {
		t.Fatalf("budget_resets score %v (%v), want %d", s, err, next)
	}

	// 5. The unblock scanner moves them back to eligible.
	valkeytest.Eventually(t, 30*time.Second, "blocked executions eligible again", func() bool {
		for _, id := range blocked {
			if e.core(id, "eligibility_state") != "eligible_now" || !e.zmember(pk(id).LaneEligible(lane), string(id)) ||
				e.zmember(pk(id).LaneBlockedBudget(lane), string(id)) {
				return false
			}
		}
		return true
	})
	for _, id := range blocked {
		if ps := e.core(id, "public_state"); ps != "waiting" {
			t.Fatalf("%s: public_state %q after unblock", id, ps)
		}
	}

	// 6. SDK workers run them within the fresh budget.
	e.runWorkers(1, worker, run.handler(e.c, bid, tokens))
	valkeytest.Eventually(t, 30*time.Second, "unblocked executions done", func() bool { return run.done(blocked) && e.allSucceeded(blocked) })
	for _, id := range blocked {
		if st := run.statusOf(id); st != valkey.BudgetOK {
			t.Fatalf("report of %s after reset: %s", id, st)
		}
		if out := e.core(id, "terminal_outcome"); out != "success" {
			t.Fatalf("%s: terminal_outcome %q", id, out)
		}
	}
}

// allSucceeded reports whether every execution in ids has completed
// with terminal_outcome success (a handler returning precedes the
// completion its worker then writes).
func (e *flowEnv) allSucceeded(ids []model.ExecutionID) bool {
	e.t.Helper()
	for _, id := range ids {
		if e.core(id, "terminal_outcome") != "success" {
			return false
		}
	}
	return true
}

// budgetExhausted is the scheduler's admission test: some dimension's
// usage is at or over its hard limit (> 0).
func (e *flowEnv) budgetExhausted(bk model.BudgetKeys) bool {
	e.t.Helper()
	limits, used := e.hgetall(bk.Limits()), e.hgetall(bk.Usage())
	for f, v := range limits {
		dim, ok := strings.CutPrefix(f, "hard:")
		if !ok {
			continue
		}
		lim, _ := strconv.ParseInt(v, 10, 64)
		u, _ := strconv.ParseInt(used[dim], 10, 64)
		if lim > 0 && u >= lim {
			return true
		}
	}
	return false
}

func (e *flowEnv) zmember(key, member string) bool {
	err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Zscore().Key(key).Member(member).Build()).Error()
	return err == nil
}

// cycles returns how many sweeps plugin name finished.
func (e *flowEnv) cycles(name string) int64 {
	st, _ := e.h.Plugin(name)
	return int64(st.Cycles)
}
