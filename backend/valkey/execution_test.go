package valkey_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

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

// subscribe subscribes to channel and returns the messages received; it
// returns once the server confirmed the subscription.
func (b *execBundle) subscribe(channel string) <-chan string {
	b.t.Helper()
	msgs := make(chan string, 64)
	confirmed := make(chan struct{})
	var once bool
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	b.t.Cleanup(func() { cancel(); <-done })
	ctx = vk.WithOnSubscriptionHook(ctx, func(s vk.PubSubSubscription) {
		if s.Kind == "subscribe" && !once {
			once = true
			close(confirmed)
		}
	})
	go func() {
		defer close(done)
		_ = b.c.Raw().Receive(ctx, b.c.Raw().B().Subscribe().Channel(channel).Build(), func(m vk.PubSubMessage) {
			select {
			case msgs <- m.Message:
			default:
			}
		})
	}()
	select {
	case <-confirmed:
	case <-b.ctx.Done():
		b.t.Fatal("subscription not confirmed")
	}
	return msgs
}

// awaitCompletion waits for the ff:dag:completions message of eid.
func (b *execBundle) awaitCompletion(msgs <-chan string, eid model.ExecutionID) map[string]string {
	b.t.Helper()
	for {
		select {
		case m := <-msgs:
			var got map[string]string
			if err := json.Unmarshal([]byte(m), &got); err != nil {
				b.t.Fatalf("completion %q: %v", m, err)
			}
			if got["execution_id"] == string(eid) {
				return got
			}
		case <-time.After(5 * time.Second):
			b.t.Fatalf("no completion published for %s", eid)
			return nil
		}
	}
}

// noCompletion asserts no completion for eid arrives after a PING round
// trip on the publishing connection (PUBLISH is synchronous with FCALL,
// so a message would already be queued).
func (b *execBundle) noCompletion(msgs <-chan string, eid model.ExecutionID, marker model.ExecutionID) {
	b.t.Helper()
	// Publish a marker after the call under test; messages arrive in order.
	b.c.Raw().Do(b.ctx, b.c.Raw().B().Publish().Channel(model.ChannelDAGCompletions).
		Message(`{"execution_id":"`+string(marker)+`"}`).Build())
	for {
		select {
		case m := <-msgs:
			var got map[string]string
			_ = json.Unmarshal([]byte(m), &got)
			if got["execution_id"] == string(eid) {
				b.t.Fatalf("unexpected completion for %s: %s", eid, m)
			}
			if got["execution_id"] == string(marker) {
				return
			}
		case <-time.After(5 * time.Second):
			b.t.Fatal("marker not received")
		}
	}
}

// grant issues a claim grant for worker w1/wi1 on lane default.
func (b *execBundle) grant(eid model.ExecutionID) {
	b.t.Helper()
	if err := b.c.IssueClaimGrant(b.ctx, &valkey.IssueClaimGrantParams{ExecutionID: eid, WorkerID: "w1",
		WorkerInstanceID: "wi1", Lane: "default", GrantTTLMs: 5000}); err != nil {
		b.t.Fatalf("IssueClaimGrant: %v", err)
	}
}

func (b *execBundle) claimParams(eid model.ExecutionID) *valkey.ClaimExecutionParams {
	return &valkey.ClaimExecutionParams{ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1",
		LaneID: "default", LeaseTTLMs: 30_000}
}

// claimed creates an execution (optionally with params) and claims it.
func (b *execBundle) claimed(p *valkey.CreateExecutionParams) (model.ExecutionID, *valkey.ClaimResult) {
	b.t.Helper()
	eid := b.create(p)
	return eid, b.claim(eid)
}

func (b *execBundle) claim(eid model.ExecutionID) *valkey.ClaimResult {
	b.t.Helper()
	b.grant(eid)
	res, err := b.c.ClaimExecution(b.ctx, b.claimParams(eid))
	if err != nil {
		b.t.Fatalf("ClaimExecution: %v", err)
	}
	return res
}

func TestClaimExecution(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid := b.create(nil)
		b.grant(eid)
		before := b.now()
		p := b.claimParams(eid)
		p.LeaseID, p.AttemptID = "L1", "A1"
		p.RenewBeforeMs = 10_000
		p.AttemptPolicyJSON = `{"timeout_ms":5,"nested":{"x":1}}`
		p.AttemptTimeoutMs = 7_000
		p.ExecutionDeadlineAt = before + 99_000
		res, err := b.c.ClaimExecution(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.LeaseID != "L1" || res.LeaseEpoch != 1 || res.AttemptID != "A1" || res.AttemptIndex != 0 ||
			res.AttemptType != "initial" || res.ExpiresAt < before+30_000 || res.ExpiresAt > before+35_000 {
			t.Fatalf("claim = %+v", res)
		}
		k, pk := model.KeysFor(eid), b.pk(eid)
		core := b.hgetall(k.Core())
		now := core["lease_acquired_at"]
		exp := strconv.FormatInt(res.ExpiresAt, 10)
		nowN, _ := strconv.ParseInt(now, 10, 64)
		wantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "active", "ownership_state": "leased", "eligibility_state": "not_applicable",
			"blocking_reason": "none", "blocking_detail": "", "terminal_outcome": "none",
			"attempt_state": "running_attempt", "public_state": "active", "current_attempt_index": "0",
			"total_attempt_count": "1", "current_attempt_id": "A1", "current_lease_id": "L1",
			"current_lease_epoch": "1", "current_worker_id": "w1", "current_worker_instance_id": "wi1",
			"current_lane": "default", "lease_expires_at": exp, "lease_last_renewed_at": now,
			"lease_renewal_deadline": strconv.FormatInt(nowN+10_000, 10), "started_at": now,
			"last_transition_at": now, "last_mutation_at": now,
		})
		wantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{
			"attempt_id": "A1", "execution_id": string(eid), "attempt_index": "0", "attempt_type": "initial",
			"attempt_state": "started", "created_at": now, "started_at": now, "lease_id": "L1",
			"lease_epoch": "1", "worker_id": "w1", "worker_instance_id": "wi1",
		})
		wantFields(t, "usage", b.hgetall(k.AttemptUsage(0)), map[string]string{"last_usage_report_seq": "0"})
		wantFields(t, "attempt policy", b.hgetall(k.AttemptPolicy(0)), map[string]string{"timeout_ms": "5", "nested": `{"x":1}`})
		lease := b.hgetall(k.LeaseCurrent())
		wantFields(t, "lease", lease, map[string]string{
			"lease_id": "L1", "lease_epoch": "1", "execution_id": string(eid), "attempt_id": "A1",
			"worker_id": "w1", "worker_instance_id": "wi1", "acquired_at": now, "expires_at": exp,
			"last_renewed_at": now, "renewal_deadline": strconv.FormatInt(nowN+10_000, 10),
		})
		if len(lease) != 10 {
			t.Errorf("lease has %d fields", len(lease))
		}
		if b.pttl(k.LeaseCurrent()) != -1 {
			t.Error("claim set a TTL on lease_current")
		}
		if b.exists(k.ClaimGrant()) {
			t.Error("grant not consumed")
		}
		if _, ok := b.zscore(pk.LaneEligible("default"), string(eid)); ok {
			t.Error("still eligible")
		}
		for _, z := range []struct {
			key  string
			want int64
		}{{pk.LeaseExpiry(), res.ExpiresAt}, {pk.LaneActive("default"), res.ExpiresAt},
			{pk.AttemptTimeout(), nowN + 7_000}, {pk.ExecutionDeadline(), before + 99_000}, {k.Attempts(), nowN}} {
			member := string(eid)
			if z.key == k.Attempts() {
				member = "0"
			}
			if s, ok := b.zscore(z.key, member); !ok || int64(s) != z.want {
				t.Errorf("%s score = %v %v; want %d", z.key, s, ok, z.want)
			}
		}
		if !b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("not in worker leases")
		}
		h := b.history(eid)
		if len(h) != 1 {
			t.Fatalf("history = %v", h)
		}
		wantFields(t, "acquired", h[0], map[string]string{"event": "acquired", "lease_id": "L1", "lease_epoch": "1",
			"attempt_id": "A1", "attempt_index": "0", "worker_id": "w1", "ts": now})
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		cases := []struct {
			name  string
			setup func(eid model.ExecutionID) *valkey.ClaimExecutionParams
			code  valkey.ErrorCode
			// grantKept: the grant must survive the rejection.
			grantKept bool
		}{
			{"NotFound", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				return b.claimParams(b.eid())
			}, valkey.CodeExecutionNotFound, true},
			{"NotRunnable", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "suspended")
				return b.claimParams(eid)
			}, valkey.CodeExecutionNotLeaseable, true},
			{"Owned", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.hset(model.KeysFor(eid).Core(), "ownership_state", "leased")
				return b.claimParams(eid)
			}, valkey.CodeLeaseConflict, true},
			{"NotEligible", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.hset(model.KeysFor(eid).Core(), "eligibility_state", "blocked_by_budget")
				return b.claimParams(eid)
			}, valkey.CodeExecutionNotLeaseable, true},
			{"HasOutcome", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.hset(model.KeysFor(eid).Core(), "terminal_outcome", "success")
				return b.claimParams(eid)
			}, valkey.CodeExecutionNotLeaseable, true},
			{"RunningAttempt", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.hset(model.KeysFor(eid).Core(), "attempt_state", "running_attempt")
				return b.claimParams(eid)
			}, valkey.CodeActiveAttemptExists, true},
			{"InterruptedAttempt", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.hset(model.KeysFor(eid).Core(), "attempt_state", "attempt_interrupted")
				return b.claimParams(eid)
			}, valkey.CodeUseClaimResumedExecution, true},
			{"NoGrant", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				b.c.Raw().Do(b.ctx, b.c.Raw().B().Del().Key(model.KeysFor(eid).ClaimGrant()).Build())
				return b.claimParams(eid)
			}, valkey.CodeInvalidClaimGrant, false},
			{"GrantForOtherWorker", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				p := b.claimParams(eid)
				p.WorkerID = "w2"
				return p
			}, valkey.CodeInvalidClaimGrant, true},
			{"GrantExpired", func(eid model.ExecutionID) *valkey.ClaimExecutionParams {
				// A grant past its expiry whose key has not been evicted yet.
				b.hset(model.KeysFor(eid).ClaimGrant(), "grant_expires_at", strconv.FormatInt(b.now()-1, 10))
				return b.claimParams(eid)
			}, valkey.CodeClaimGrantExpired, true},
		}
		for _, tc := range cases {
			eid := b.create(nil)
			b.grant(eid)
			p := tc.setup(eid)
			_, err := b.c.ClaimExecution(b.ctx, p)
			wantCode(t, err, tc.code)
			if got := b.exists(model.KeysFor(eid).ClaimGrant()); got != tc.grantKept {
				t.Errorf("%s: grant exists = %v; want %v", tc.name, got, tc.grantKept)
			}
			if b.exists(model.KeysFor(p.ExecutionID).LeaseCurrent()) {
				t.Errorf("%s: lease written", tc.name)
			}
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid := b.create(nil)
		b.grant(eid)
		cases := []struct {
			idx    int
			val    string
			code   valkey.ErrorCode
			detail string
		}{
			{6, "x", valkey.CodeInvalidInput, "lease_ttl_ms must be a number, got: x"},
			{6, "", valkey.CodeInvalidInput, "lease_ttl_ms must be a number, got: "},
			{7, "soon", valkey.CodeInvalidInput, "renew_before_ms must be a number, got: soon"},
			{10, "1s", valkey.CodeInvalidInput, "attempt_timeout_ms must be a number, got: 1s"},
			{11, "tomorrow", valkey.CodeInvalidInput, "execution_deadline_at must be a number, got: tomorrow"},
			{9, "{oops", valkey.CodeInvalidPolicyJSON, "malformed"},
		}
		for _, tc := range cases {
			call := b.claimParams(eid).Call()
			call.Args[tc.idx] = tc.val
			_, err := b.fcall(call)
			if le := wantCode(t, err, tc.code); le.Detail(0) != tc.detail {
				t.Errorf("ARGV[%d]=%q detail = %q; want %q", tc.idx+1, tc.val, le.Detail(0), tc.detail)
			}
		}
		if !b.exists(model.KeysFor(eid).ClaimGrant()) {
			t.Error("bad input consumed the grant")
		}
		// The missing-ARGV form is invalid_input too, not a script error.
		_, err := b.fcall(valkey.Call{Function: "ff_claim_execution", Keys: b.claimParams(eid).Call().Keys, Args: []string{string(eid)}})
		wantCode(t, err, valkey.CodeInvalidInput)
	})
}

func TestCompleteExecution(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, cl := b.claimed(&valkey.CreateExecutionParams{ExecutionDeadlineAt: 1 << 50})
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.hset(k.StreamMeta(0), "stream_id", "s")
		// attempt_timeout entry to be cleaned.
		b.c.Raw().Do(b.ctx, b.c.Raw().B().Zadd().Key(pk.AttemptTimeout()).ScoreMember().ScoreMember(1, string(eid)).Build())
		if err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: cl.Fence(), Result: "out"}); err != nil {
			t.Fatal(err)
		}
		core := b.hgetall(k.Core())
		done := core["completed_at"]
		wantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "terminal", "ownership_state": "unowned", "eligibility_state": "not_applicable",
			"blocking_reason": "none", "blocking_detail": "", "terminal_outcome": "success",
			"attempt_state": "attempt_terminal", "public_state": "completed", "current_lease_id": "",
			"current_worker_id": "", "current_worker_instance_id": "", "lease_expires_at": "",
			"lease_last_renewed_at": "", "lease_renewal_deadline": "", "lease_expired_at": "",
			"lease_revoked_at": "", "lease_revoke_reason": "", "last_transition_at": done,
			"last_mutation_at": done,
			// Kept for replay recognition.
			"current_attempt_id": cl.AttemptID, "current_attempt_index": "0", "current_lease_epoch": "1",
			"lease_acquired_at": core["started_at"],
		})
		wantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "ended_success", "ended_at": done})
		wantFields(t, "stream meta", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_at": done, "closed_reason": "attempt_success"})
		if v, _ := b.get(k.Result()); v != "out" {
			t.Errorf("result = %q", v)
		}
		if b.exists(k.LeaseCurrent()) {
			t.Error("lease_current kept")
		}
		for _, key := range []string{pk.LeaseExpiry(), pk.LaneActive("default"), pk.AttemptTimeout(), pk.ExecutionDeadline()} {
			if _, ok := b.zscore(key, string(eid)); ok {
				t.Errorf("still in %s", key)
			}
		}
		if b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("still in worker leases")
		}
		if s, ok := b.zscore(pk.LaneTerminal("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != done {
			t.Errorf("terminal score = %v %v", s, ok)
		}
		h := b.history(eid)
		wantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "lease_id": cl.LeaseID,
			"lease_epoch": "1", "attempt_index": "0", "reason": "completed", "ts": done})
		if _, ok := h[len(h)-1]["attempt_id"]; ok {
			t.Error("completed release carries attempt_id")
		}

		// A replay of the same call reports execution_not_active with the
		// four details the SDK uses to recognise its own completion.
		err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: cl.Fence()})
		le := wantCode(t, err, valkey.CodeExecutionNotActive)
		if want := []string{"success", "1", "terminal", cl.AttemptID}; strconv.Quote(strings.Join(le.Details, "|")) != strconv.Quote(strings.Join(want, "|")) {
			t.Errorf("details = %v; want %v", le.Details, want)
		}
	})

	t.Run("FlowMemberPublishes", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		msgs := b.subscribe(model.ChannelDAGCompletions)
		eid, cl := b.claimed(nil)
		b.hset(model.KeysFor(eid).Core(), "flow_id", "flow-1")
		if err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: cl.Fence()}); err != nil {
			t.Fatal(err)
		}
		got := b.awaitCompletion(msgs, eid)
		if got["flow_id"] != "flow-1" || got["outcome"] != "success" || len(got) != 3 {
			t.Errorf("completion = %v", got)
		}
		if b.exists(model.KeysFor(eid).Result()) {
			t.Error("empty result stored")
		}
		// A standalone execution publishes nothing.
		solo, cl2 := b.claimed(nil)
		if err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: solo, Fence: cl2.Fence()}); err != nil {
			t.Fatal(err)
		}
		b.noCompletion(msgs, solo, b.eid())
	})

	t.Run("OperatorOverrideWithEmptyFence", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, _ := b.claimed(nil)
		err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid})
		wantCode(t, err, valkey.CodeFenceRequired)
		if err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Source: valkey.SourceOperatorOverride}); err != nil {
			t.Fatal(err)
		}
		if core := b.hgetall(model.KeysFor(eid).Core()); core["public_state"] != "completed" {
			t.Errorf("public_state = %q", core["public_state"])
		}
	})

	t.Run("FenceErrors", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		testLeaseFenceErrors(t, b, func(eid model.ExecutionID, f valkey.LeaseFence, source string) error {
			return b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: f, Source: source})
		})
	})
}

// testLeaseFenceErrors checks the fence and lease errors shared by
// complete, fail, delay and move-to-waiting-children; call must perform the
// operation with the given fence and source.
func testLeaseFenceErrors(t *testing.T, b *execBundle, call func(model.ExecutionID, valkey.LeaseFence, string) error) {
	t.Helper()
	// Missing execution.
	wantCode(t, call(b.eid(), valkey.LeaseFence{LeaseID: "l", LeaseEpoch: 1, AttemptID: "a"}, ""), valkey.CodeExecutionNotFound)

	eid, cl := b.claimed(nil)
	core0 := b.hgetall(model.KeysFor(eid).Core())
	// Partial triples.
	for _, f := range []valkey.LeaseFence{{LeaseID: cl.LeaseID}, {LeaseEpoch: 1}, {LeaseID: cl.LeaseID, LeaseEpoch: 1}, {AttemptID: cl.AttemptID}} {
		wantCode(t, call(eid, f, ""), valkey.CodePartialFenceTriple)
		wantCode(t, call(eid, f, valkey.SourceOperatorOverride), valkey.CodePartialFenceTriple)
	}
	// Empty fence without override.
	wantCode(t, call(eid, valkey.LeaseFence{}, ""), valkey.CodeFenceRequired)
	wantCode(t, call(eid, valkey.LeaseFence{}, "worker"), valkey.CodeFenceRequired)
	// Stale epoch, lease id, attempt id.
	stale := cl.Fence()
	stale.LeaseEpoch = 2
	wantCode(t, call(eid, stale, ""), valkey.CodeStaleLease)
	stale = cl.Fence()
	stale.LeaseID = "other"
	wantCode(t, call(eid, stale, ""), valkey.CodeStaleLease)
	stale = cl.Fence()
	stale.AttemptID = "other"
	wantCode(t, call(eid, stale, ""), valkey.CodeStaleLease)
	// None of the rejections wrote anything.
	if core := b.hgetall(model.KeysFor(eid).Core()); core["last_mutation_at"] != core0["last_mutation_at"] || core["lifecycle_phase"] != "active" {
		t.Errorf("rejected calls mutated the core: %v", core)
	}

	// Revoked lease.
	rev, clr := b.claimed(nil)
	b.hset(model.KeysFor(rev).Core(), "ownership_state", "lease_revoked")
	wantCode(t, call(rev, clr.Fence(), ""), valkey.CodeLeaseRevoked)
	wantCode(t, call(rev, valkey.LeaseFence{}, valkey.SourceOperatorOverride), valkey.CodeLeaseRevoked)

	// Expired lease: marked expired as a side effect.
	exp, cle := b.claimed(nil)
	k := model.KeysFor(exp)
	b.hset(k.Core(), "lease_expires_at", strconv.FormatInt(b.now()-1, 10))
	b.hset(k.StreamMeta(0), "stream_id", "s")
	wantCode(t, call(exp, cle.Fence(), ""), valkey.CodeLeaseExpired)
	core := b.hgetall(k.Core())
	wantFields(t, "expired core", core, map[string]string{
		"lifecycle_phase": "active", "ownership_state": "lease_expired_reclaimable",
		"blocking_reason": "waiting_for_worker", "blocking_detail": "lease expired, awaiting reclaim",
		"attempt_state": "attempt_interrupted", "public_state": "active",
		"lease_expired_at": core["last_mutation_at"],
	})
	wantFields(t, "expired stream meta", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "lease_expired"})
	h := b.history(exp)
	if h[len(h)-1]["event"] != "expired" {
		t.Errorf("last history event = %v", h[len(h)-1])
	}

	// Not active: a runnable execution.
	idle := b.create(nil)
	le := wantCode(t, call(idle, valkey.LeaseFence{LeaseID: "l", LeaseEpoch: 1, AttemptID: "a"}, ""), valkey.CodeExecutionNotActive)
	if len(le.Details) != 4 || le.Details[0] != "none" || le.Details[1] != "0" || le.Details[2] != "runnable" || le.Details[3] != "" {
		t.Errorf("not-active details = %q", le.Details)
	}
}
