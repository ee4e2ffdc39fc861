package valkey_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

const famNow = int64(1_700_000_000_000)

func famBudget(t *testing.T, c *valkey.Client, interval int64, dims ...valkey.BudgetDimension) (model.UUID, model.BudgetKeys) {
	t.Helper()
	id := model.NewUUID()
	ctx := valkeytest.Context(t, 10*time.Second)
	res, err := c.CreateBudget(ctx, &valkey.CreateBudgetParams{
		BudgetID: id, ScopeType: "tenant", ScopeID: "t1", EnforcementMode: "strict",
		OnHardLimit: "block", OnSoftLimit: "warn", ResetIntervalMs: interval, NowMs: famNow,
		Dimensions: dims,
	})
	if err != nil || res.AlreadyExisted || res.BudgetID != id.String() {
		t.Fatalf("CreateBudget = %+v, %v", res, err)
	}
	return id, model.BudgetKeysFor(c.Partitions().BudgetPartition(id), id)
}

func TestCreateBudget(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id, k := famBudget(t, c, 60000,
		valkey.BudgetDimension{Name: "tokens", Hard: 100, Soft: 80},
		valkey.BudgetDimension{Name: "usd", Hard: 0, Soft: 5})

	famWantFields(t, c, k.Definition(), map[string]string{
		"budget_id": id.String(), "scope_type": "tenant", "scope_id": "t1", "enforcement_mode": "strict",
		"on_hard_limit": "block", "on_soft_limit": "warn", "reset_interval_ms": "60000",
		"breach_count": "0", "soft_breach_count": "0", "created_at": "1700000000000",
		"last_updated_at": "1700000000000", "next_reset_at": "1700000060000",
	})
	if got := len(famHash(t, c, k.Definition())); got != 12 {
		t.Errorf("def has %d fields, want 12", got)
	}
	famWantFields(t, c, k.Limits(), map[string]string{
		"hard:tokens": "100", "soft:tokens": "80", "hard:usd": "0", "soft:usd": "5"})
	if famExists(t, c, k.Usage()) {
		t.Error("usage hash created at budget creation")
	}
	if s, ok := famScore(t, c, k.Resets(), id.String()); !ok || s != 1700000060000 {
		t.Errorf("budget_resets score = %v %v", s, ok)
	}
	if !famIsMember(t, c, k.Policies(), id.String()) {
		t.Error("not in budget_policies")
	}

	// Idempotent: ALREADY_SATISFIED, but the policies index is healed
	// first.
	c.Raw().Do(ctx, c.Raw().B().Del().Key(k.Policies()).Build())
	res, err := c.CreateBudget(ctx, &valkey.CreateBudgetParams{BudgetID: id, NowMs: famNow + 5})
	if err != nil || !res.AlreadyExisted || res.BudgetID != id.String() {
		t.Fatalf("second CreateBudget = %+v, %v", res, err)
	}
	if !famIsMember(t, c, k.Policies(), id.String()) {
		t.Error("ALREADY_SATISFIED path did not SADD budget_policies")
	}
	famWantFields(t, c, k.Definition(), map[string]string{"created_at": "1700000000000"})

	// No interval: nothing scheduled.
	id2, k2 := famBudget(t, c, 0, valkey.BudgetDimension{Name: "tokens", Hard: 1})
	if _, ok := famScore(t, c, k2.Resets(), id2.String()); ok {
		t.Error("budget without interval scheduled for reset")
	}
	if _, ok := famHash(t, c, k2.Definition())["next_reset_at"]; ok {
		t.Error("next_reset_at written without interval")
	}

	// Bad input → invalid_input, no Lua runtime error, no def written.
	bad := model.NewUUID()
	bk := model.BudgetKeysFor(c.Partitions().BudgetPartition(bad), bad)
	keys := []string{bk.Definition(), bk.Limits(), bk.Usage(), bk.Resets(), bk.Policies()}
	for name, args := range map[string][]string{
		"dim_count":   {bad.String(), "s", "i", "m", "h", "s", "0", "1", "x"},
		"interval":    {bad.String(), "s", "i", "m", "h", "s", "abc", "1", "0"},
		"short":       {bad.String(), "s", "i", "m", "h", "s", "0", "1", "2", "a", "b", "1"},
		"missing_all": {},
	} {
		_, err := c.FCall(ctx, "ff_create_budget", keys, args)
		if !famCodeIs(err, valkey.CodeInvalidInput) {
			t.Errorf("%s: err = %v, want invalid_input", name, err)
		}
	}
	if famExists(t, c, bk.Definition()) {
		t.Error("invalid create wrote the def")
	}
}

func TestReportUsage(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id, k := famBudget(t, c, 0,
		valkey.BudgetDimension{Name: "tokens", Hard: 100, Soft: 50},
		valkey.BudgetDimension{Name: "calls", Hard: 10, Soft: 0},
		valkey.BudgetDimension{Name: "free", Hard: 0, Soft: 0})
	report := func(now int64, dedup string, d ...valkey.UsageDelta) *valkey.UsageResult {
		t.Helper()
		r, err := c.ReportUsage(ctx, &valkey.ReportUsageParams{BudgetID: id, Deltas: d, NowMs: now, DedupID: dedup})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Under every limit.
	r := report(famNow+1, "", famD("tokens", 40), famD("calls", 1))
	if *r != (valkey.UsageResult{Status: valkey.BudgetOK}) {
		t.Fatalf("first report = %+v", r)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"tokens": "40", "calls": "1"})
	famWantFields(t, c, k.Definition(), map[string]string{"last_updated_at": "1700000000001"})

	// Soft breach: advisory, the increment happens.
	r = report(famNow+2, "", famD("tokens", 20), famD("calls", 1))
	if *r != (valkey.UsageResult{Status: valkey.BudgetSoftBreach, Dimension: "tokens", Current: "60", Limit: "50"}) {
		t.Fatalf("soft report = %+v", r)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"tokens": "60", "calls": "2"})
	famWantFields(t, c, k.Definition(), map[string]string{"soft_breach_count": "1", "breach_count": "0"})

	// Hard breach on the SECOND dimension: checked before any increment,
	// so the first dimension is not incremented either.
	r = report(famNow+3, "", famD("tokens", 1), famD("calls", 9))
	if *r != (valkey.UsageResult{Status: valkey.BudgetHardBreach, Dimension: "calls", Current: "2", Limit: "10"}) {
		t.Fatalf("hard report = %+v", r)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"tokens": "60", "calls": "2"})
	famWantFields(t, c, k.Definition(), map[string]string{
		"breach_count": "1", "last_breach_at": "1700000000003", "last_breach_dim": "calls",
		"last_updated_at": "1700000000003", "soft_breach_count": "1"})

	// Exactly at the hard limit is allowed (current + delta > hard breaches).
	r = report(famNow+4, "", famD("calls", 8))
	if r.Status != valkey.BudgetOK {
		t.Fatalf("at-limit report = %+v", r)
	}
	// A limit of 0 means no limit.
	r = report(famNow+5, "", famD("free", 1_000_000))
	if r.Status != valkey.BudgetOK {
		t.Fatalf("unlimited report = %+v", r)
	}

	// Dedup: the second report with the same id changes nothing.
	r = report(famNow+6, "d1", famD("tokens", 1))
	if r.Status != valkey.BudgetSoftBreach || r.Current != "61" {
		t.Fatalf("dedup first = %+v", r)
	}
	dk := k.UsageDedup("d1")
	if famGet(t, c, dk) != "1" {
		t.Fatal("dedup key not written")
	}
	if ttl := famPTTL(t, c, dk); ttl <= 86_000_000 || ttl > 86_400_000 {
		t.Fatalf("dedup PTTL = %d", ttl)
	}
	r = report(famNow+7, "d1", famD("tokens", 1))
	if *r != (valkey.UsageResult{Status: valkey.BudgetAlreadyApplied}) {
		t.Fatalf("dedup replay = %+v", r)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"tokens": "61"})
	famWantFields(t, c, k.Definition(), map[string]string{"last_updated_at": "1700000000006"})
	// A hard breach does not consume the dedup id.
	r = report(famNow+8, "d2", famD("tokens", 1000))
	if r.Status != valkey.BudgetHardBreach || famExists(t, c, k.UsageDedup("d2")) {
		t.Fatalf("hard breach with dedup = %+v", r)
	}

	// Exact wire shapes.
	keys := []string{k.Usage(), k.Limits(), k.Definition()}
	famWantRaw(t, c, "ff_report_usage_and_check", keys,
		[]string{"1", "tokens", "500", "9", ""}, int64(1), "HARD_BREACH", "tokens", "61", "100")
	famWantRaw(t, c, "ff_report_usage_and_check", keys,
		[]string{"1", "calls", "0", "9", ""}, int64(1), "OK")

	// Bad input.
	for name, args := range map[string][]string{
		"dim_count":   {"x"},
		"delta":       {"1", "tokens", "abc", "9", ""},
		"fractional":  {"1", "tokens", "1.5", "9", ""},
		"missing_now": {"1", "tokens", "1"},
		"missing_dim": {"2", "tokens"},
	} {
		_, err := c.FCall(ctx, "ff_report_usage_and_check", keys, args)
		if !famCodeIs(err, valkey.CodeInvalidInput) {
			t.Errorf("%s: err = %v, want invalid_input", name, err)
		}
	}
	famWantFields(t, c, k.Usage(), map[string]string{"tokens": "61"})
}

func TestRecordSpendAndRelease(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id, k := famBudget(t, c, 0,
		valkey.BudgetDimension{Name: "usd", Hard: 100, Soft: 10},
		valkey.BudgetDimension{Name: "tokens", Hard: 0, Soft: 0})
	eid := c.Partitions().NewSoloExecutionID("default")
	spend := func(dedup string, e model.ExecutionID, d ...valkey.UsageDelta) *valkey.UsageResult {
		t.Helper()
		r, err := c.RecordSpend(ctx, &valkey.ReportUsageParams{BudgetID: id, Deltas: d, NowMs: famNow, DedupID: dedup, ExecutionID: e})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := spend("s1", eid, famD("usd", 8), famD("tokens", 500)); r.Status != valkey.BudgetOK {
		t.Fatalf("spend = %+v", r)
	}
	if r := spend("s1", eid, famD("usd", 8)); r.Status != valkey.BudgetAlreadyApplied {
		t.Fatalf("dedup spend = %+v", r)
	}
	if r := spend("", eid, famD("usd", 5)); *r != (valkey.UsageResult{Status: valkey.BudgetSoftBreach, Dimension: "usd", Current: "13", Limit: "10"}) {
		t.Fatalf("soft spend = %+v", r)
	}
	// Hard breach: nothing incremented, ledger untouched.
	if r := spend("", eid, famD("tokens", 1), famD("usd", 88)); r.Status != valkey.BudgetHardBreach || r.Dimension != "usd" || r.Current != "13" || r.Limit != "100" {
		t.Fatalf("hard spend = %+v", r)
	}
	// Spend without an execution: aggregate only.
	if r := spend("", "", famD("tokens", 7)); r.Status != valkey.BudgetOK {
		t.Fatalf("anonymous spend = %+v", r)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"usd": "13", "tokens": "507"})
	famWantFields(t, c, k.ByExec(eid), map[string]string{"usd": "13", "tokens": "500"})
	if got := famMembers(t, c, k.ByExecIndex()); len(got) != 1 || got[0] != string(eid) {
		t.Fatalf("by_exec index = %v", got)
	}
	if famExists(t, c, k.ByExec("")) {
		t.Fatal("anonymous spend wrote a ledger")
	}

	// Reset shrinks the aggregate below the ledger: release clamps at 0.
	famHSet(t, c, k.Usage(), "usd", "3")
	out, err := c.ReleaseBudget(ctx, id, eid)
	if err != nil || out != "released" {
		t.Fatalf("ReleaseBudget = %q, %v", out, err)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"usd": "0", "tokens": "7"})
	if famExists(t, c, k.ByExec(eid)) || famIsMember(t, c, k.ByExecIndex(), string(eid)) {
		t.Fatal("ledger not cleared")
	}
	out, err = c.ReleaseBudget(ctx, id, eid)
	if err != nil || out != "noop" {
		t.Fatalf("second ReleaseBudget = %q, %v", out, err)
	}
	famWantRaw(t, c, "ff_release_budget", []string{k.Usage(), k.ByExec(eid), k.ByExecIndex()},
		[]string{id.String(), string(eid)}, int64(1), "OK", "noop")

	// Bad input.
	keys := []string{k.Usage(), k.Limits(), k.Definition(), k.ByExec(eid), k.ByExecIndex()}
	for name, args := range map[string][]string{
		"pair_count": {"many"},
		"delta":      {"1", "usd", "x", "1", "", ""},
	} {
		if _, err := c.FCall(ctx, "ff_record_spend", keys, args); !famCodeIs(err, valkey.CodeInvalidInput) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := c.FCall(ctx, "ff_release_budget", []string{k.Usage(), k.ByExec(eid), k.ByExecIndex()}, []string{id.String()}); !famCodeIs(err, valkey.CodeInvalidInput) {
		t.Errorf("release without eid: %v", err)
	}
}

func TestResetBudget(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id, k := famBudget(t, c, 1000, valkey.BudgetDimension{Name: "tokens", Hard: 10, Soft: 5})
	if _, err := c.ReportUsage(ctx, &valkey.ReportUsageParams{BudgetID: id, NowMs: famNow,
		Deltas: []valkey.UsageDelta{famD("tokens", 11)}}); err != nil {
		t.Fatal(err)
	}
	famHSet(t, c, k.Usage(), "tokens", "9", "breached_at", "123")
	next, err := c.ResetBudget(ctx, id, famNow+500)
	if err != nil || next != famNow+1500 {
		t.Fatalf("ResetBudget = %d, %v", next, err)
	}
	famWantFields(t, c, k.Usage(), map[string]string{"tokens": "0", "breached_at": "0"})
	famWantFields(t, c, k.Definition(), map[string]string{
		"reset_count": "1", "last_reset_at": "1700000000500", "last_updated_at": "1700000000500",
		"last_breach_at": "", "last_breach_dim": "", "next_reset_at": "1700000001500"})
	if s, ok := famScore(t, c, k.Resets(), id.String()); !ok || s != float64(famNow+1500) {
		t.Fatalf("resets score = %v %v", s, ok)
	}

	// No interval: unscheduled, reply "0".
	id2, k2 := famBudget(t, c, 0)
	famHSet(t, c, k2.Definition(), "reset_interval_ms", "0")
	c.Raw().Do(ctx, c.Raw().B().Zadd().Key(k2.Resets()).ScoreMember().ScoreMember(1, id2.String()).Build())
	famWantRaw(t, c, "ff_reset_budget", []string{k2.Definition(), k2.Usage(), k2.Resets()},
		[]string{id2.String(), "42"}, int64(1), "OK", "0")
	if _, ok := famScore(t, c, k2.Resets(), id2.String()); ok {
		t.Fatal("reset without interval left the budget scheduled")
	}
	famWantFields(t, c, k2.Definition(), map[string]string{"reset_count": "1", "last_reset_at": "42"})

	if _, err := c.FCall(ctx, "ff_reset_budget", []string{k.Definition(), k.Usage(), k.Resets()},
		[]string{id.String(), "soon"}); !famCodeIs(err, valkey.CodeInvalidInput) {
		t.Fatalf("bad now_ms: %v", err)
	}
}

func TestBlockAndUnblockExecution(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	eid := c.Partitions().NewSoloExecutionID("lane-b")
	pk := model.KeysOn(eid.Partition())
	core := model.KeysFor(eid).Core()
	famSeedExec(t, c, eid, "lane-b", 5000, "priority", "3", "attempt_state", "pending_retry_attempt")

	if err := c.BlockExecutionForAdmission(ctx, eid, "waiting_for_quota", "quota q1 full", famNow); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, core, map[string]string{
		"lifecycle_phase": "runnable", "ownership_state": "unowned", "eligibility_state": "blocked_by_quota",
		"blocking_reason": "waiting_for_quota", "blocking_detail": "quota q1 full", "terminal_outcome": "none",
		"attempt_state": "pending_retry_attempt", "public_state": "rate_limited",
		"last_transition_at": "1700000000000", "last_mutation_at": "1700000000000"})
	if _, ok := famScore(t, c, pk.LaneEligible("lane-b"), string(eid)); ok {
		t.Fatal("still eligible after block")
	}
	if s, ok := famScore(t, c, pk.LaneBlockedQuota("lane-b"), string(eid)); !ok || s != float64(famNow) {
		t.Fatalf("blocked:quota score = %v %v", s, ok)
	}

	// Unblock with the wrong expected reason is refused.
	err := c.UnblockExecution(ctx, eid, famNow+1, "waiting_for_budget")
	famWantCode(t, err, valkey.CodeExecutionNotEligible)

	if err := c.UnblockExecution(ctx, eid, famNow+2, "waiting_for_quota"); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, core, map[string]string{
		"eligibility_state": "eligible_now", "blocking_reason": "waiting_for_worker", "blocking_detail": "",
		"attempt_state": "pending_retry_attempt", "public_state": "waiting", "last_mutation_at": "1700000000002"})
	if _, ok := famScore(t, c, pk.LaneBlockedQuota("lane-b"), string(eid)); ok {
		t.Fatal("still blocked after unblock")
	}
	if s, ok := famScore(t, c, pk.LaneEligible("lane-b"), string(eid)); !ok || s != 5000-3e12 {
		t.Fatalf("eligible score = %v %v", s, ok)
	}
	// Not blocked any more.
	famWantCode(t, c.UnblockExecution(ctx, eid, famNow+3, ""), valkey.CodeExecutionNotEligible)

	// Every admission reason maps to its eligibility; public_state is
	// always rate_limited.
	for reason, elig := range map[string]string{
		"waiting_for_budget": "blocked_by_budget", "waiting_for_capable_worker": "blocked_by_route",
		"paused_by_operator": "blocked_by_operator", "paused_by_policy": "blocked_by_lane_state",
	} {
		e := c.Partitions().NewSoloExecutionID("l")
		famSeedExec(t, c, e, "l", 1, "attempt_state", "")
		c.Raw().Do(ctx, c.Raw().B().Hdel().Key(model.KeysFor(e).Core()).Field("attempt_state").Build())
		if err := c.BlockExecutionForAdmission(ctx, e, reason, "", famNow); err != nil {
			t.Fatal(err)
		}
		famWantFields(t, c, model.KeysFor(e).Core(), map[string]string{
			"eligibility_state": elig, "public_state": "rate_limited", "attempt_state": "pending_first_attempt"})
	}

	// Errors.
	other := c.Partitions().NewSoloExecutionID("l")
	famSeedExec(t, c, other, "l", 1)
	famWantCode(t, c.BlockExecutionForAdmission(ctx, other, "waiting_for_godot", "", famNow), valkey.CodeInvalidBlockingReason)
	famWantFields(t, c, model.KeysFor(other).Core(), map[string]string{"eligibility_state": "eligible_now"})
	famHSet(t, c, model.KeysFor(other).Core(), "lifecycle_phase", "active")
	famWantCode(t, c.BlockExecutionForAdmission(ctx, other, "waiting_for_budget", "", famNow), valkey.CodeExecutionNotEligible)
	famHSet(t, c, model.KeysFor(other).Core(), "lifecycle_phase", "terminal", "terminal_outcome", "success",
		"current_lease_epoch", "2", "current_attempt_id", "att-1")
	famWantRaw(t, c, "ff_block_execution_for_admission",
		[]string{model.KeysFor(other).Core(), pk.LaneEligible("l"), pk.LaneBlockedBudget("l")},
		[]string{string(other), "waiting_for_budget", "", "1"},
		int64(0), "execution_not_active", "success", "2", "terminal", "att-1")
	famWantCode(t, c.UnblockExecution(ctx, other, famNow, ""), valkey.CodeExecutionNotEligible)

	missing := c.Partitions().NewSoloExecutionID("l")
	famWantCode(t, c.BlockExecutionForAdmission(ctx, missing, "waiting_for_budget", "", famNow), valkey.CodeExecutionNotFound)
	famWantCode(t, c.UnblockExecution(ctx, missing, famNow, ""), valkey.CodeExecutionNotFound)

	// Bad numbers.
	mk := model.KeysFor(other).Core()
	if _, err := c.FCall(ctx, "ff_block_execution_for_admission", []string{mk, "a", "b"},
		[]string{string(other), "waiting_for_budget", "", "noon"}); !famCodeIs(err, valkey.CodeInvalidInput) {
		t.Errorf("block bad now: %v", err)
	}
	if _, err := c.FCall(ctx, "ff_unblock_execution", []string{mk, "a", "b"},
		[]string{string(other), "noon", ""}); !famCodeIs(err, valkey.CodeInvalidInput) {
		t.Errorf("unblock bad now: %v", err)
	}
}

// A hard budget breach blocks the execution; after a reset the unblock
// releases it back to eligible.
func TestBudgetBreachBlocksUntilReset(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id, k := famBudget(t, c, 3_600_000, valkey.BudgetDimension{Name: "tokens", Hard: 100, Soft: 0})
	eid := c.Partitions().NewSoloExecutionID("default")
	pk := model.KeysOn(eid.Partition())
	famSeedExec(t, c, eid, "default", 10)
	famHSet(t, c, model.KeysFor(eid).Core(), "budget_ids", id.String())

	r, err := c.ReportUsage(ctx, &valkey.ReportUsageParams{BudgetID: id, NowMs: famNow,
		Deltas: []valkey.UsageDelta{famD("tokens", 101)}})
	if err != nil || r.Status != valkey.BudgetHardBreach {
		t.Fatalf("report = %+v, %v", r, err)
	}
	if err := c.BlockExecutionForAdmission(ctx, eid, "waiting_for_budget", "budget "+id.String()+" exhausted", famNow); err != nil {
		t.Fatal(err)
	}
	if _, ok := famScore(t, c, pk.LaneBlockedBudget("default"), string(eid)); !ok {
		t.Fatal("not in blocked:budget")
	}
	if _, err := c.ResetBudget(ctx, id, famNow+1); err != nil {
		t.Fatal(err)
	}
	if err := c.UnblockExecution(ctx, eid, famNow+2, "waiting_for_budget"); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, model.KeysFor(eid).Core(), map[string]string{
		"eligibility_state": "eligible_now", "public_state": "waiting"})
	if _, ok := famScore(t, c, pk.LaneEligible("default"), string(eid)); !ok {
		t.Fatal("not eligible after unblock")
	}
	if _, ok := famScore(t, c, pk.LaneBlockedBudget("default"), string(eid)); ok {
		t.Fatal("still in blocked:budget")
	}
	_ = k
}
