package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// execBundle is the per-test fixture of the execution family tests.
type execBundle struct {
	t   *testing.T
	c   *valkey.Client
	ctx context.Context
}

func setupExec(t *testing.T) *execBundle {
	t.Helper()
	return &execBundle{t: t, c: valkeytest.Client(t), ctx: valkeytest.Context(t, 20*time.Second)}
}

// eid mints a solo execution id on lane "default".
func (b *execBundle) eid() model.ExecutionID {
	return model.DefaultPartitionConfig().NewSoloExecutionID("default")
}

func (b *execBundle) pk(eid model.ExecutionID) model.PartitionKeys {
	return model.KeysOn(eid.Partition())
}

func (b *execBundle) hgetall(key string) map[string]string {
	b.t.Helper()
	m, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		b.t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

func (b *execBundle) get(key string) (string, bool) {
	b.t.Helper()
	s, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Get().Key(key).Build()).ToString()
	if err != nil {
		return "", false
	}
	return s, true
}

func (b *execBundle) exists(key string) bool {
	b.t.Helper()
	n, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		b.t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// zscore returns the score of member in key, and whether it is a member.
func (b *execBundle) zscore(key, member string) (float64, bool) {
	b.t.Helper()
	f, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Zscore().Key(key).Member(member).Build()).AsFloat64()
	if err != nil {
		return 0, false
	}
	return f, true
}

func (b *execBundle) sismember(key, member string) bool {
	b.t.Helper()
	ok, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Sismember().Key(key).Member(member).Build()).AsBool()
	if err != nil {
		b.t.Fatalf("SISMEMBER %s: %v", key, err)
	}
	return ok
}

func (b *execBundle) pttl(key string) int64 {
	b.t.Helper()
	n, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		b.t.Fatalf("PTTL %s: %v", key, err)
	}
	return n
}

func (b *execBundle) hset(key string, kv ...string) {
	b.t.Helper()
	cmd := b.c.Raw().B().Hset().Key(key).FieldValue()
	for i := 0; i+1 < len(kv); i += 2 {
		cmd = cmd.FieldValue(kv[i], kv[i+1])
	}
	if err := b.c.Raw().Do(b.ctx, cmd.Build()).Error(); err != nil {
		b.t.Fatalf("HSET %s: %v", key, err)
	}
}

func (b *execBundle) set(key, val string) {
	b.t.Helper()
	if err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Set().Key(key).Value(val).Build()).Error(); err != nil {
		b.t.Fatalf("SET %s: %v", key, err)
	}
}

// history returns the lease_history entries' field maps, oldest first.
func (b *execBundle) history(eid model.ExecutionID) []map[string]string {
	b.t.Helper()
	entries, err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Xrange().Key(model.KeysFor(eid).LeaseHistory()).
		Start("-").End("+").Build()).AsXRange()
	if err != nil {
		b.t.Fatalf("XRANGE: %v", err)
	}
	out := make([]map[string]string, len(entries))
	for i, e := range entries {
		out[i] = e.FieldValues
	}
	return out
}

func (b *execBundle) now() int64 {
	b.t.Helper()
	n, err := b.c.ServerTime(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// fcall runs fn with raw KEYS/ARGV and returns reply or error.
func (b *execBundle) fcall(call valkey.Call) (*valkey.Reply, error) {
	return b.c.FCall(b.ctx, call.Function, call.Keys, call.Args)
}

// wantCode fails unless err is a *LuaError with code.
func wantCode(t *testing.T, err error, code valkey.ErrorCode) *valkey.LuaError {
	t.Helper()
	var le *valkey.LuaError
	if !errors.As(err, &le) || le.Code != code {
		t.Fatalf("error = %v; want code %s", err, code)
	}
	return le
}

func wantFields(t *testing.T, what string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s[%s] = %q (present %v); want %q", what, k, g, ok, v)
		}
	}
}

func (b *execBundle) create(p *valkey.CreateExecutionParams) model.ExecutionID {
	b.t.Helper()
	if p == nil {
		p = &valkey.CreateExecutionParams{}
	}
	if p.ExecutionID == "" {
		p.ExecutionID = b.eid()
	}
	if p.Namespace == "" {
		p.Namespace = "ns"
	}
	if p.LaneID == "" {
		p.LaneID = "default"
	}
	if p.ExecutionKind == "" {
		p.ExecutionKind = "kind"
	}
	res, err := b.c.CreateExecution(b.ctx, p)
	if err != nil || res.Duplicate {
		b.t.Fatalf("CreateExecution = %+v, %v", res, err)
	}
	return p.ExecutionID
}

func TestCreateExecution(t *testing.T) {
	t.Parallel()

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		cases := []struct {
			name   string
			mutate func(*valkey.Call)
			code   valkey.ErrorCode
			detail string
		}{
			{"NonNumericPriority", func(c *valkey.Call) { c.Args[4] = "high" }, valkey.CodeInvalidInput, "priority must be a number, got: high"},
			{"MissingPriority", func(c *valkey.Call) { c.Args = c.Args[:4] }, valkey.CodeInvalidInput, "priority must be a number, got: nil"},
			{"NonNumericDelay", func(c *valkey.Call) { c.Args[8] = "soon" }, valkey.CodeInvalidInput, "delay_until must be a number, got: soon"},
			{"NonNumericDeadline", func(c *valkey.Call) { c.Args[11] = "x" }, valkey.CodeInvalidInput, "execution_deadline_at must be a number, got: x"},
			{"MalformedPolicy", func(c *valkey.Call) { c.Args[6] = "{not json" }, valkey.CodeInvalidPolicyJSON, "malformed"},
			{"RoutingNotObject", func(c *valkey.Call) { c.Args[6] = `{"routing_requirements":5}` }, valkey.CodeInvalidPolicyJSON, "routing_requirements:not_object"},
			{"CapsNotArray", func(c *valkey.Call) {
				c.Args[6] = `{"routing_requirements":{"required_capabilities":"gpu"}}`
			}, valkey.CodeInvalidCapabilities, "required:not_array"},
			{"CapsNonString", func(c *valkey.Call) {
				c.Args[6] = `{"routing_requirements":{"required_capabilities":["gpu",42]}}`
			}, valkey.CodeInvalidCapabilities, "required:non_string_token"},
			{"CapsEmptyToken", func(c *valkey.Call) {
				c.Args[6] = `{"routing_requirements":{"required_capabilities":[""]}}`
			}, valkey.CodeInvalidCapabilities, "required:empty_token"},
			{"CapsComma", func(c *valkey.Call) {
				c.Args[6] = `{"routing_requirements":{"required_capabilities":["a,b"]}}`
			}, valkey.CodeInvalidCapabilities, "required:comma_in_token"},
			{"CapsWhitespace", func(c *valkey.Call) {
				c.Args[6] = `{"routing_requirements":{"required_capabilities":["a b"]}}`
			}, valkey.CodeInvalidCapabilities, "required:control_or_whitespace"},
		}
		for _, tc := range cases {
			p := &valkey.CreateExecutionParams{ExecutionID: b.eid(), Namespace: "ns", LaneID: "default"}
			call := p.Call()
			tc.mutate(&call)
			_, err := b.fcall(call)
			le := wantCode(t, err, tc.code)
			if le.Detail(0) != tc.detail {
				t.Errorf("%s: detail = %q; want %q", tc.name, le.Detail(0), tc.detail)
			}
			// Validation happens before any write.
			if b.exists(model.KeysFor(p.ExecutionID).Core()) {
				t.Errorf("%s: exec_core written despite error", tc.name)
			}
		}
	})

	t.Run("Delayed", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		until := b.now() + 60_000
		eid := b.create(&valkey.CreateExecutionParams{DelayUntil: until, ExecutionDeadlineAt: until + 5})
		core := b.hgetall(model.KeysFor(eid).Core())
		wantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "runnable", "eligibility_state": "not_eligible_until_time",
			"blocking_reason": "waiting_for_delay", "blocking_detail": "delayed until " + strconv.FormatInt(until, 10),
			"public_state": "delayed", "delay_until": strconv.FormatInt(until, 10),
			"attempt_state": "pending_first_attempt",
		})
		pk := b.pk(eid)
		if s, ok := b.zscore(pk.LaneDelayed("default"), string(eid)); !ok || int64(s) != until {
			t.Errorf("delayed score = %v %v; want %d", s, ok, until)
		}
		if _, ok := b.zscore(pk.LaneEligible("default"), string(eid)); ok {
			t.Error("delayed execution is in eligible")
		}
		if s, ok := b.zscore(pk.ExecutionDeadline(), string(eid)); !ok || int64(s) != until+5 {
			t.Errorf("deadline score = %v %v", s, ok)
		}
	})

	t.Run("DelayInThePastIsEligible", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid := b.eid()
		p := &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: "ns", LaneID: "default", DelayUntil: 1000}
		res, err := b.c.CreateExecution(b.ctx, p)
		if err != nil || res.PublicState != "waiting" {
			t.Fatalf("CreateExecution = %+v, %v", res, err)
		}
		core := b.hgetall(model.KeysFor(eid).Core())
		wantFields(t, "core", core, map[string]string{"eligibility_state": "eligible_now", "delay_until": ""})
		// The caller chose the delayed zset as KEYS[5]; Lua scores it as eligible.
		if s, ok := b.zscore(b.pk(eid).LaneDelayed("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != core["created_at"] {
			t.Errorf("delayed-slot score = %v %v; want created_at %s", s, ok, core["created_at"])
		}
	})

	t.Run("DuplicateByID", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid := b.create(nil)
		res, err := b.c.CreateExecution(b.ctx, &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: "ns", LaneID: "default", Priority: 9})
		if err != nil || !res.Duplicate || res.ExecutionID != eid {
			t.Fatalf("second create = %+v, %v", res, err)
		}
		if core := b.hgetall(model.KeysFor(eid).Core()); core["priority"] != "0" {
			t.Errorf("duplicate overwrote priority: %q", core["priority"])
		}
	})

	t.Run("DuplicateByIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		first := b.create(&valkey.CreateExecutionParams{IdempotencyKey: "k1", DedupTTL: 5 * time.Second})
		idem := b.pk(first).Idempotency("ns", "k1")
		if v, ok := b.get(idem); !ok || v != string(first) {
			t.Fatalf("idem key = %q %v", v, ok)
		}
		if ttl := b.pttl(idem); ttl <= 0 || ttl > 5000 {
			t.Errorf("idem PTTL = %d; want (0,5000]", ttl)
		}
		// A second id on the same partition with the same key dedupes to the first.
		second := model.NewExecutionID(first.Partition(), model.NewUUID())
		res, err := b.c.CreateExecution(b.ctx, &valkey.CreateExecutionParams{
			ExecutionID: second, Namespace: "ns", LaneID: "default", IdempotencyKey: "k1"})
		if err != nil || !res.Duplicate || res.ExecutionID != first {
			t.Fatalf("dedup create = %+v, %v", res, err)
		}
		if b.exists(model.KeysFor(second).Core()) {
			t.Error("deduped create wrote a core")
		}
	})

	t.Run("EligibleWithPolicyTagsPayload", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid := b.eid()
		policy := `{"routing_requirements":{"required_capabilities":["zeta","gpu","alpha"]},"max_reclaim_count":3}`
		res, err := b.c.CreateExecution(b.ctx, &valkey.CreateExecutionParams{
			ExecutionID: eid, Namespace: "tenant", LaneID: "fast", ExecutionKind: "email",
			Priority: 12000, CreatorIdentity: "me", PolicyJSON: policy, Payload: "in",
			Tags: map[string]string{"app.owner": "bob", "n": "1"},
		})
		if err != nil || res.Duplicate || res.PublicState != "waiting" || res.ExecutionID != eid {
			t.Fatalf("CreateExecution = %+v, %v", res, err)
		}
		k := model.KeysFor(eid)
		core := b.hgetall(k.Core())
		created := core["created_at"]
		wantFields(t, "core", core, map[string]string{
			"execution_id": string(eid), "namespace": "tenant", "lane_id": "fast", "execution_kind": "email",
			"partition_id": strconv.Itoa(int(eid.Partition().Index)), "priority": "9000",
			"creator_identity": "me", "lifecycle_phase": "runnable", "ownership_state": "unowned",
			"eligibility_state": "eligible_now", "blocking_reason": "waiting_for_worker", "blocking_detail": "",
			"terminal_outcome": "none", "attempt_state": "pending_first_attempt", "public_state": "waiting",
			"total_attempt_count": "0", "current_attempt_index": "", "current_attempt_id": "",
			"current_lease_id": "", "current_lease_epoch": "0", "current_worker_id": "",
			"current_worker_instance_id": "", "current_lane": "fast", "retry_count": "0",
			"replay_count": "0", "lease_reclaim_count": "0", "started_at": "", "completed_at": "",
			"last_transition_at": created, "last_mutation_at": created, "lease_acquired_at": "",
			"lease_expires_at": "", "lease_last_renewed_at": "", "lease_renewal_deadline": "",
			"lease_expired_at": "", "lease_revoked_at": "", "lease_revoke_reason": "", "delay_until": "",
			"current_suspension_id": "", "current_waitpoint_id": "", "pending_retry_reason": "",
			"pending_replay_reason": "", "pending_replay_requested_by": "",
			"pending_previous_attempt_index": "", "progress_pct": "", "progress_message": "",
			"progress_updated_at": "", "flow_id": "", "required_capabilities": "alpha,gpu,zeta",
		})
		if len(core) != 50 {
			t.Errorf("core has %d fields; want 50", len(core))
		}
		if v, _ := b.get(k.Payload()); v != "in" {
			t.Errorf("payload = %q", v)
		}
		if v, _ := b.get(k.Policy()); v != policy {
			t.Errorf("policy = %q", v)
		}
		wantFields(t, "tags", b.hgetall(k.Tags()), map[string]string{"app.owner": "bob", "n": "1"})
		pk := b.pk(eid)
		createdN, _ := strconv.ParseInt(created, 10, 64)
		if s, ok := b.zscore(pk.LaneEligible("fast"), string(eid)); !ok || int64(s) != createdN-9000*1_000_000_000_000 {
			t.Errorf("eligible score = %v %v; want %d", s, ok, createdN-9000*1_000_000_000_000)
		}
		if !b.sismember(pk.AllExecutions(), string(eid)) {
			t.Error("not in all_executions")
		}
		if !b.sismember(model.KeyLanesIndex, "fast") {
			t.Error("lane not registered in ff:idx:lanes")
		}
		if _, ok := b.zscore(pk.ExecutionDeadline(), string(eid)); ok {
			t.Error("deadline indexed without a deadline")
		}
		if b.exists(pk.Noop()) {
			t.Error("noop key written")
		}
	})

	t.Run("NegativePriorityClampsToZeroAndEmptyPolicyStored", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		p := &valkey.CreateExecutionParams{ExecutionID: b.eid(), Namespace: "ns", LaneID: "default", Priority: -5}
		call := p.Call()
		call.Args[6] = ""               // no policy at all: nothing stored
		call.Args[10] = "not json tags" // decode errors are ignored
		rep, err := b.fcall(call)
		if err != nil || rep.Status != "OK" {
			t.Fatalf("create = %+v, %v", rep, err)
		}
		k := model.KeysFor(p.ExecutionID)
		if core := b.hgetall(k.Core()); core["priority"] != "0" {
			t.Errorf("priority = %q", core["priority"])
		}
		if b.exists(k.Policy()) || b.exists(k.Tags()) || b.exists(k.Payload()) {
			t.Error("policy/tags/payload written for empty inputs")
		}
	})
}

func TestExecutionCore(t *testing.T) {
	t.Parallel()
	b := setupExec(t)
	_, err := b.c.ExecutionCore(b.ctx, b.eid())
	if !errors.Is(err, valkey.CodeExecutionNotFound) {
		t.Fatalf("missing core err = %v", err)
	}
	eid := b.create(nil)
	core, err := b.c.ExecutionCore(b.ctx, eid)
	if err != nil || core["execution_id"] != string(eid) {
		t.Fatalf("ExecutionCore = %v, %v", core, err)
	}
}
