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
func execWantCode(t *testing.T, err error, code valkey.ErrorCode) *valkey.LuaError {
	t.Helper()
	var le *valkey.LuaError
	if !errors.As(err, &le) || le.Code != code {
		t.Fatalf("error = %v; want code %s", err, code)
	}
	return le
}

func execWantFields(t *testing.T, what string, got map[string]string, want map[string]string) {
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
			le := execWantCode(t, err, tc.code)
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
		execWantFields(t, "core", core, map[string]string{
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
		execWantFields(t, "core", core, map[string]string{"eligibility_state": "eligible_now", "delay_until": ""})
		// The caller chose the delayed zset as KEYS[5]. Upstream scores the
		// execution as eligible inside the delayed zset, where the promoter
		// drops it and no claimer finds it; fabric puts it in the eligible
		// index of the same lane instead.
		if _, ok := b.zscore(b.pk(eid).LaneDelayed("default"), string(eid)); ok {
			t.Error("an eligible execution sits in lane:delayed, where it would be lost")
		}
		if s, ok := b.zscore(b.pk(eid).LaneEligible("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != core["created_at"] {
			t.Errorf("eligible score = %v %v; want created_at %s", s, ok, core["created_at"])
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
		execWantFields(t, "core", core, map[string]string{
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
		execWantFields(t, "tags", b.hgetall(k.Tags()), map[string]string{"app.owner": "bob", "n": "1"})
		pk := b.pk(eid)
		createdN, _ := strconv.ParseInt(created, 10, 64)
		if s, ok := b.zscore(pk.LaneEligible("fast"), string(eid)); !ok || int64(s) != createdN-9000*1_000_000_000_000 {
			t.Errorf("eligible score = %v %v; want %d", s, ok, createdN-9000*1_000_000_000_000)
		}
		if !b.sismember(pk.AllExecutions(), string(eid)) {
			t.Error("not in all_executions")
		}
		if b.sismember(model.KeyLanesIndex, "fast") {
			t.Error("create wrote the untagged ff:idx:lanes (cross-slot in cluster mode; lanes are seeded at boot)")
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
		case <-time.After(30 * time.Second):
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
		case <-time.After(30 * time.Second):
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
		execWantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "active", "ownership_state": "leased", "eligibility_state": "not_applicable",
			"blocking_reason": "none", "blocking_detail": "", "terminal_outcome": "none",
			"attempt_state": "running_attempt", "public_state": "active", "current_attempt_index": "0",
			"total_attempt_count": "1", "current_attempt_id": "A1", "current_lease_id": "L1",
			"current_lease_epoch": "1", "current_worker_id": "w1", "current_worker_instance_id": "wi1",
			"current_lane": "default", "lease_expires_at": exp, "lease_last_renewed_at": now,
			"lease_renewal_deadline": strconv.FormatInt(nowN+10_000, 10), "started_at": now,
			"last_transition_at": now, "last_mutation_at": now,
		})
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{
			"attempt_id": "A1", "execution_id": string(eid), "attempt_index": "0", "attempt_type": "initial",
			"attempt_state": "started", "created_at": now, "started_at": now, "lease_id": "L1",
			"lease_epoch": "1", "worker_id": "w1", "worker_instance_id": "wi1",
		})
		execWantFields(t, "usage", b.hgetall(k.AttemptUsage(0)), map[string]string{"last_usage_report_seq": "0"})
		execWantFields(t, "attempt policy", b.hgetall(k.AttemptPolicy(0)), map[string]string{"timeout_ms": "5", "nested": `{"x":1}`})
		lease := b.hgetall(k.LeaseCurrent())
		execWantFields(t, "lease", lease, map[string]string{
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
		execWantFields(t, "acquired", h[0], map[string]string{"event": "acquired", "lease_id": "L1", "lease_epoch": "1",
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
			execWantCode(t, err, tc.code)
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
			if le := execWantCode(t, err, tc.code); le.Detail(0) != tc.detail {
				t.Errorf("ARGV[%d]=%q detail = %q; want %q", tc.idx+1, tc.val, le.Detail(0), tc.detail)
			}
		}
		if !b.exists(model.KeysFor(eid).ClaimGrant()) {
			t.Error("bad input consumed the grant")
		}
		// The missing-ARGV form is invalid_input too, not a script error.
		_, err := b.fcall(valkey.Call{Function: "ff_claim_execution", Keys: b.claimParams(eid).Call().Keys, Args: []string{string(eid)}})
		execWantCode(t, err, valkey.CodeInvalidInput)
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
		execWantFields(t, "core", core, map[string]string{
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
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "ended_success", "ended_at": done})
		execWantFields(t, "stream meta", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_at": done, "closed_reason": "attempt_success"})
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
		execWantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "lease_id": cl.LeaseID,
			"lease_epoch": "1", "attempt_index": "0", "reason": "completed", "ts": done})
		if _, ok := h[len(h)-1]["attempt_id"]; ok {
			t.Error("completed release carries attempt_id")
		}

		// A replay of the same call reports execution_not_active with the
		// four details the SDK uses to recognise its own completion.
		err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: cl.Fence()})
		le := execWantCode(t, err, valkey.CodeExecutionNotActive)
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
		execWantCode(t, err, valkey.CodeFenceRequired)
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
	execWantCode(t, call(b.eid(), valkey.LeaseFence{LeaseID: "l", LeaseEpoch: 1, AttemptID: "a"}, ""), valkey.CodeExecutionNotFound)

	eid, cl := b.claimed(nil)
	core0 := b.hgetall(model.KeysFor(eid).Core())
	// Partial triples.
	for _, f := range []valkey.LeaseFence{{LeaseID: cl.LeaseID}, {LeaseEpoch: 1}, {LeaseID: cl.LeaseID, LeaseEpoch: 1}, {AttemptID: cl.AttemptID}} {
		execWantCode(t, call(eid, f, ""), valkey.CodePartialFenceTriple)
		execWantCode(t, call(eid, f, valkey.SourceOperatorOverride), valkey.CodePartialFenceTriple)
	}
	// Empty fence without override.
	execWantCode(t, call(eid, valkey.LeaseFence{}, ""), valkey.CodeFenceRequired)
	execWantCode(t, call(eid, valkey.LeaseFence{}, "worker"), valkey.CodeFenceRequired)
	// Stale epoch, lease id, attempt id.
	stale := cl.Fence()
	stale.LeaseEpoch = 2
	execWantCode(t, call(eid, stale, ""), valkey.CodeStaleLease)
	stale = cl.Fence()
	stale.LeaseID = "other"
	execWantCode(t, call(eid, stale, ""), valkey.CodeStaleLease)
	stale = cl.Fence()
	stale.AttemptID = "other"
	execWantCode(t, call(eid, stale, ""), valkey.CodeStaleLease)
	// None of the rejections wrote anything.
	if core := b.hgetall(model.KeysFor(eid).Core()); core["last_mutation_at"] != core0["last_mutation_at"] || core["lifecycle_phase"] != "active" {
		t.Errorf("rejected calls mutated the core: %v", core)
	}

	// Revoked lease.
	rev, clr := b.claimed(nil)
	b.hset(model.KeysFor(rev).Core(), "ownership_state", "lease_revoked")
	execWantCode(t, call(rev, clr.Fence(), ""), valkey.CodeLeaseRevoked)
	execWantCode(t, call(rev, valkey.LeaseFence{}, valkey.SourceOperatorOverride), valkey.CodeLeaseRevoked)

	// Expired lease: marked expired as a side effect.
	exp, cle := b.claimed(nil)
	k := model.KeysFor(exp)
	b.hset(k.Core(), "lease_expires_at", strconv.FormatInt(b.now()-1, 10))
	b.hset(k.StreamMeta(0), "stream_id", "s")
	execWantCode(t, call(exp, cle.Fence(), ""), valkey.CodeLeaseExpired)
	core := b.hgetall(k.Core())
	execWantFields(t, "expired core", core, map[string]string{
		"lifecycle_phase": "active", "ownership_state": "lease_expired_reclaimable",
		"blocking_reason": "waiting_for_worker", "blocking_detail": "lease expired, awaiting reclaim",
		"attempt_state": "attempt_interrupted", "public_state": "active",
		"lease_expired_at": core["last_mutation_at"],
	})
	execWantFields(t, "expired stream meta", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "lease_expired"})
	h := b.history(exp)
	if h[len(h)-1]["event"] != "expired" {
		t.Errorf("last history event = %v", h[len(h)-1])
	}

	// Not active: a runnable execution.
	idle := b.create(nil)
	le := execWantCode(t, call(idle, valkey.LeaseFence{LeaseID: "l", LeaseEpoch: 1, AttemptID: "a"}, ""), valkey.CodeExecutionNotActive)
	if len(le.Details) != 4 || le.Details[0] != "none" || le.Details[1] != "0" || le.Details[2] != "runnable" || le.Details[3] != "" {
		t.Errorf("not-active details = %q", le.Details)
	}
}

func (b *execBundle) zadd(key string, score float64, member string) {
	b.t.Helper()
	if err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Zadd().Key(key).ScoreMember().ScoreMember(score, member).Build()).Error(); err != nil {
		b.t.Fatalf("ZADD %s: %v", key, err)
	}
}

func (b *execBundle) sadd(key, member string) {
	b.t.Helper()
	if err := b.c.Raw().Do(b.ctx, b.c.Raw().B().Sadd().Key(key).Member(member).Build()).Error(); err != nil {
		b.t.Fatalf("SADD %s: %v", key, err)
	}
}

func execAtoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func TestFailExecution(t *testing.T) {
	t.Parallel()

	t.Run("RetryBackoff", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		cases := []struct {
			name       string
			policy     string
			retryCount string
			backoff    int64
		}{
			{"ExponentialFirst", `{"max_retries":3,"backoff":{"type":"exponential","initial_delay_ms":100,"multiplier":3,"max_delay_ms":250}}`, "0", 100},
			{"ExponentialCapped", `{"max_retries":3,"backoff":{"type":"exponential","initial_delay_ms":100,"multiplier":3,"max_delay_ms":250}}`, "1", 250},
			{"ExponentialDefaults", `{"max_retries":5,"backoff":{"type":"exponential"}}`, "2", 4000},
			{"Fixed", `{"max_retries":1,"backoff":{"type":"fixed","delay_ms":2500}}`, "0", 2500},
			{"FixedDefault", `{"max_retries":1,"backoff":{"type":"fixed"}}`, "0", 1000},
			{"DefaultBackoff", `{"max_retries":2}`, "1", 1000},
			{"UnknownType", `{"max_retries":2,"backoff":{"type":"linear","delay_ms":5}}`, "0", 1000},
			{"FractionalRoundsUp", `{"max_retries":5,"backoff":{"type":"exponential","initial_delay_ms":10,"multiplier":1.25}}`, "1", 13},
			{"FractionalRoundsDown", `{"max_retries":5,"backoff":{"type":"fixed","delay_ms":7.2}}`, "0", 7},
		}
		for _, tc := range cases {
			eid, cl := b.claimed(nil)
			k, pk := model.KeysFor(eid), b.pk(eid)
			b.hset(k.Core(), "retry_count", tc.retryCount, "flow_id", "f-retry")
			b.hset(k.StreamMeta(0), "stream_id", "s")
			res, err := b.c.FailExecution(b.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Fence: cl.Fence(),
				FailureReason: "boom", FailureCategory: "transient", RetryPolicyJSON: tc.policy})
			if err != nil || !res.RetryScheduled {
				t.Fatalf("%s: FailExecution = %+v, %v", tc.name, res, err)
			}
			core := b.hgetall(k.Core())
			now := core["last_mutation_at"]
			if res.DelayUntil != execAtoi64(now)+tc.backoff {
				t.Errorf("%s: delay_until = %d; want now %s + %d", tc.name, res.DelayUntil, now, tc.backoff)
			}
			until := strconv.FormatInt(res.DelayUntil, 10)
			execWantFields(t, tc.name+" core", core, map[string]string{
				"lifecycle_phase": "runnable", "ownership_state": "unowned", "eligibility_state": "not_eligible_until_time",
				"blocking_reason": "waiting_for_retry_backoff", "terminal_outcome": "none",
				"blocking_detail": "retry backoff until " + until + " (attempt 0 failed: boom)",
				"attempt_state":   "pending_retry_attempt", "public_state": "delayed", "pending_retry_reason": "boom",
				"pending_previous_attempt_index": "0", "retry_count": strconv.Itoa(int(execAtoi64(tc.retryCount)) + 1),
				"current_attempt_id": "", "current_lease_id": "", "current_worker_id": "", "current_worker_instance_id": "",
				"lease_expires_at": "", "lease_last_renewed_at": "", "lease_renewal_deadline": "", "delay_until": until,
				"failure_reason": "boom", "last_transition_at": now, "current_lease_epoch": "1", "completed_at": "",
			})
			execWantFields(t, tc.name+" attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "ended_failure",
				"ended_at": now, "failure_reason": "boom", "failure_category": "transient"})
			execWantFields(t, tc.name+" stream", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "attempt_failure", "closed_at": now})
			if s, ok := b.zscore(pk.LaneDelayed("default"), string(eid)); !ok || int64(s) != res.DelayUntil {
				t.Errorf("%s: delayed score = %v %v", tc.name, s, ok)
			}
			if _, ok := b.zscore(pk.LeaseExpiry(), string(eid)); ok || b.exists(k.LeaseCurrent()) || b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
				t.Errorf("%s: lease not released", tc.name)
			}
			if _, ok := b.zscore(pk.LaneTerminal("default"), string(eid)); ok {
				t.Errorf("%s: retry added to terminal", tc.name)
			}
			h := b.history(eid)
			execWantFields(t, tc.name+" released", h[len(h)-1], map[string]string{"event": "released", "reason": "failed_retry_scheduled",
				"lease_id": cl.LeaseID, "lease_epoch": "1", "attempt_index": "0", "ts": now})
		}
	})

	t.Run("RetryThenClaimCreatesRetryAttemptAndNoPublish", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		msgs := b.subscribe(model.ChannelDAGCompletions)
		// The wrapper reads retry_policy from the stored policy.
		eid, cl := b.claimed(&valkey.CreateExecutionParams{PolicyJSON: `{"retry_policy":{"max_retries":1,"backoff":{"type":"fixed","delay_ms":700}}}`})
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.hset(k.Core(), "flow_id", "f1")
		res, err := b.c.FailExecution(b.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Fence: cl.Fence(), FailureReason: "net"})
		if err != nil || !res.RetryScheduled || res.DelayUntil != execAtoi64(b.hgetall(k.Core())["last_mutation_at"])+700 {
			t.Fatalf("FailExecution = %+v, %v", res, err)
		}
		b.noCompletion(msgs, eid, b.eid())
		// Promote by hand (ff_promote_delayed belongs to scheduling).
		b.hset(k.Core(), "eligibility_state", "eligible_now")
		b.zadd(pk.LaneEligible("default"), 1, string(eid))
		cl2 := b.claim(eid)
		if cl2.AttemptIndex != 1 || cl2.LeaseEpoch != 2 || cl2.AttemptType != "retry" {
			t.Fatalf("retry claim = %+v", cl2)
		}
		execWantFields(t, "retry attempt", b.hgetall(k.Attempt(1)), map[string]string{"attempt_type": "retry",
			"retry_reason": "net", "previous_attempt_index": "0", "attempt_index": "1"})
		core := b.hgetall(k.Core())
		execWantFields(t, "core", core, map[string]string{"pending_retry_reason": "", "pending_previous_attempt_index": "",
			"total_attempt_count": "2", "current_attempt_index": "1", "retry_count": "1"})
		// The second failure exhausts max_retries=1: terminal, published.
		out, err := b.c.FailExecution(b.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Fence: cl2.Fence(), FailureReason: "net2"})
		if err != nil || out.RetryScheduled {
			t.Fatalf("second fail = %+v, %v", out, err)
		}
		if got := b.awaitCompletion(msgs, eid); got["outcome"] != "failed" || got["flow_id"] != "f1" {
			t.Errorf("completion = %v", got)
		}
	})

	t.Run("Terminal", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		cases := []struct{ name, policy, retryCount string }{
			{"NoPolicy", "", "0"},
			{"MaxRetriesDefaultsToZero", `{"backoff":{"type":"fixed","delay_ms":5}}`, "0"},
			{"Exhausted", `{"max_retries":2}`, "2"},
			{"MalformedPolicyIgnored", `{"max_retries":`, "0"},
			{"NonNumericMaxRetries", `{"max_retries":"lots"}`, "0"},
		}
		for _, tc := range cases {
			eid, cl := b.claimed(&valkey.CreateExecutionParams{ExecutionDeadlineAt: 1 << 50})
			k, pk := model.KeysFor(eid), b.pk(eid)
			b.hset(k.Core(), "retry_count", tc.retryCount)
			res, err := b.c.FailExecution(b.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Fence: cl.Fence(),
				FailureReason: "bad", FailureCategory: "permanent", RetryPolicyJSON: tc.policy})
			if err != nil || res.RetryScheduled {
				t.Fatalf("%s: FailExecution = %+v, %v", tc.name, res, err)
			}
			core := b.hgetall(k.Core())
			now := core["last_mutation_at"]
			execWantFields(t, tc.name, core, map[string]string{"lifecycle_phase": "terminal", "ownership_state": "unowned",
				"eligibility_state": "not_applicable", "blocking_reason": "none", "blocking_detail": "",
				"terminal_outcome": "failed", "attempt_state": "attempt_terminal", "public_state": "failed",
				"failure_reason": "bad", "completed_at": now, "current_lease_id": "", "current_attempt_id": cl.AttemptID,
				"retry_count": tc.retryCount, "lease_expires_at": "", "current_worker_instance_id": ""})
			if s, ok := b.zscore(pk.LaneTerminal("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != now {
				t.Errorf("%s: terminal score %v %v", tc.name, s, ok)
			}
			for _, key := range []string{pk.ExecutionDeadline(), pk.LeaseExpiry(), pk.LaneActive("default"), pk.LaneDelayed("default")} {
				if _, ok := b.zscore(key, string(eid)); ok {
					t.Errorf("%s: still in %s", tc.name, key)
				}
			}
			h := b.history(eid)
			if h[len(h)-1]["reason"] != "failed_terminal" {
				t.Errorf("%s: last event %v", tc.name, h[len(h)-1])
			}
		}
	})

	t.Run("FenceErrors", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		testLeaseFenceErrors(t, b, func(eid model.ExecutionID, f valkey.LeaseFence, source string) error {
			_, err := b.c.FailExecution(b.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Fence: f, Source: source, FailureReason: "x"})
			return err
		})
		eid, _ := b.claimed(nil)
		if res, err := b.c.FailExecution(b.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Source: valkey.SourceOperatorOverride}); err != nil || res.RetryScheduled {
			t.Fatalf("override fail = %+v, %v", res, err)
		}
	})
}

func TestDelayExecution(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, cl := b.claimed(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.zadd(pk.AttemptTimeout(), 1, string(eid))
		until := b.now() + 50_000
		if err := b.c.DelayExecution(b.ctx, &valkey.DelayExecutionParams{ExecutionID: eid, Fence: cl.Fence(), DelayUntil: until}); err != nil {
			t.Fatal(err)
		}
		us := strconv.FormatInt(until, 10)
		core := b.hgetall(k.Core())
		now := core["last_mutation_at"]
		execWantFields(t, "core", core, map[string]string{"lifecycle_phase": "runnable", "ownership_state": "unowned",
			"eligibility_state": "not_eligible_until_time", "blocking_reason": "waiting_for_delay",
			"blocking_detail": "delayed until " + us, "terminal_outcome": "none", "attempt_state": "attempt_interrupted",
			"public_state": "delayed", "delay_until": us, "current_lease_id": "", "current_worker_id": "",
			"current_worker_instance_id": "", "lease_expires_at": "", "lease_last_renewed_at": "",
			"lease_renewal_deadline": "", "last_transition_at": now, "current_attempt_id": cl.AttemptID})
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "suspended",
			"suspended_at": now, "suspension_id": "worker_delay"})
		if s, ok := b.zscore(pk.LaneDelayed("default"), string(eid)); !ok || int64(s) != until {
			t.Errorf("delayed score %v %v", s, ok)
		}
		for _, key := range []string{pk.LeaseExpiry(), pk.LaneActive("default"), pk.AttemptTimeout()} {
			if _, ok := b.zscore(key, string(eid)); ok {
				t.Errorf("still in %s", key)
			}
		}
		if b.exists(k.LeaseCurrent()) || b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("lease not released")
		}
		h := b.history(eid)
		execWantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "reason": "worker_delay",
			"lease_id": cl.LeaseID, "lease_epoch": "1", "attempt_index": "0", "attempt_id": cl.AttemptID, "ts": now})
	})

	t.Run("OperatorOverride", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, cl := b.claimed(nil)
		if err := b.c.DelayExecution(b.ctx, &valkey.DelayExecutionParams{ExecutionID: eid, DelayUntil: 5, Source: valkey.SourceOperatorOverride}); err != nil {
			t.Fatal(err)
		}
		h := b.history(eid)
		// The server's own triple is recorded.
		execWantFields(t, "released", h[len(h)-1], map[string]string{"lease_id": cl.LeaseID, "attempt_id": cl.AttemptID})
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, cl := b.claimed(nil)
		for _, v := range []string{"", "later"} {
			keys := append([]string{model.KeysFor(eid).Core()}, make([]string, 8)...)
			_, err := b.fcall(valkey.Call{Function: "ff_delay_execution", Keys: keys,
				Args: []string{string(eid), cl.LeaseID, "1", cl.AttemptID, v}})
			if le := execWantCode(t, err, valkey.CodeInvalidInput); le.Detail(0) != "delay_until must be a number, got: "+v {
				t.Errorf("detail = %q", le.Detail(0))
			}
		}
		if core := b.hgetall(model.KeysFor(eid).Core()); core["lifecycle_phase"] != "active" {
			t.Error("bad input changed the execution")
		}
	})

	t.Run("FenceErrors", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		testLeaseFenceErrors(t, b, func(eid model.ExecutionID, f valkey.LeaseFence, source string) error {
			return b.c.DelayExecution(b.ctx, &valkey.DelayExecutionParams{ExecutionID: eid, Fence: f, Source: source, DelayUntil: 1})
		})
	})
}

func TestMoveToWaitingChildren(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, cl := b.claimed(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		if err := b.c.MoveToWaitingChildren(b.ctx, &valkey.MoveToWaitingChildrenParams{ExecutionID: eid, Fence: cl.Fence()}); err != nil {
			t.Fatal(err)
		}
		core := b.hgetall(k.Core())
		now := core["last_mutation_at"]
		execWantFields(t, "core", core, map[string]string{"lifecycle_phase": "runnable", "ownership_state": "unowned",
			"eligibility_state": "blocked_by_dependencies", "blocking_reason": "waiting_for_children",
			"blocking_detail": "waiting for child executions to complete", "attempt_state": "attempt_interrupted",
			"public_state": "waiting_children", "current_lease_id": "", "lease_expires_at": "", "last_transition_at": now})
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "suspended",
			"suspended_at": now, "suspension_id": "waiting_children"})
		if s, ok := b.zscore(pk.LaneBlockedDependencies("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != core["created_at"] {
			t.Errorf("blocked score %v %v; want created_at %s", s, ok, core["created_at"])
		}
		if _, ok := b.zscore(pk.LaneActive("default"), string(eid)); ok || b.exists(k.LeaseCurrent()) {
			t.Error("lease not released")
		}
		h := b.history(eid)
		execWantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "reason": "waiting_children",
			"attempt_id": cl.AttemptID, "lease_epoch": "1"})
	})

	t.Run("FenceErrors", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		testLeaseFenceErrors(t, b, func(eid model.ExecutionID, f valkey.LeaseFence, source string) error {
			return b.c.MoveToWaitingChildren(b.ctx, &valkey.MoveToWaitingChildrenParams{ExecutionID: eid, Fence: f, Source: source})
		})
	})
}

func TestCancelExecution(t *testing.T) {
	t.Parallel()

	t.Run("Runnable", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid := b.create(&valkey.CreateExecutionParams{ExecutionDeadlineAt: 1 << 50})
		pk := b.pk(eid)
		from, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Reason: "nope"})
		if err != nil || from != "runnable" {
			t.Fatalf("cancel = %q, %v", from, err)
		}
		core := b.hgetall(model.KeysFor(eid).Core())
		now := core["completed_at"]
		execWantFields(t, "core", core, map[string]string{"lifecycle_phase": "terminal", "ownership_state": "unowned",
			"eligibility_state": "not_applicable", "blocking_reason": "none", "blocking_detail": "",
			"terminal_outcome": "cancelled", "attempt_state": "pending_first_attempt", "public_state": "cancelled",
			"cancellation_reason": "nope", "cancelled_by": string(eid), "last_transition_at": now,
			"current_suspension_id": "", "current_waitpoint_id": ""})
		if _, ok := b.zscore(pk.LaneEligible("default"), string(eid)); ok {
			t.Error("still eligible")
		}
		if _, ok := b.zscore(pk.ExecutionDeadline(), string(eid)); ok {
			t.Error("still in execution_deadline")
		}
		if s, ok := b.zscore(pk.LaneTerminal("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != now {
			t.Errorf("terminal score %v %v", s, ok)
		}
		// Cancelling again: execution_not_active with phase "terminal".
		_, err = b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Reason: "again"})
		le := execWantCode(t, err, valkey.CodeExecutionNotActive)
		if strings.Join(le.Details, "|") != "cancelled|0|terminal|" {
			t.Errorf("details = %q", le.Details)
		}
		_, err = b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: b.eid()})
		execWantCode(t, err, valkey.CodeExecutionNotFound)
	})

	t.Run("ActiveWorker", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		msgs := b.subscribe(model.ChannelDAGCompletions)
		eid, cl := b.claimed(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.hset(k.Core(), "flow_id", "fc")
		b.hset(k.StreamMeta(0), "stream_id", "s")
		_, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Source: "worker", LeaseID: "other", LeaseEpoch: 1})
		execWantCode(t, err, valkey.CodeStaleLease)
		_, err = b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Source: "worker", LeaseID: cl.LeaseID, LeaseEpoch: 7})
		execWantCode(t, err, valkey.CodeStaleLease)
		from, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Reason: "stop", Source: "worker",
			LeaseID: cl.LeaseID, LeaseEpoch: cl.LeaseEpoch})
		if err != nil || from != "active" {
			t.Fatalf("cancel = %q, %v", from, err)
		}
		core := b.hgetall(k.Core())
		now := core["completed_at"]
		execWantFields(t, "core", core, map[string]string{"terminal_outcome": "cancelled", "attempt_state": "attempt_terminal",
			"cancelled_by": "worker", "current_lease_id": "", "current_worker_instance_id": "", "lease_expires_at": ""})
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "ended_cancelled",
			"ended_at": now, "failure_reason": "cancelled: stop"})
		execWantFields(t, "stream", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "attempt_cancelled"})
		if b.exists(k.LeaseCurrent()) || b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("lease not released")
		}
		for _, key := range []string{pk.LeaseExpiry(), pk.LaneActive("default")} {
			if _, ok := b.zscore(key, string(eid)); ok {
				t.Errorf("still in %s", key)
			}
		}
		h := b.history(eid)
		execWantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "reason": "cancelled",
			"lease_id": cl.LeaseID, "lease_epoch": "1", "attempt_index": "0"})
		if got := b.awaitCompletion(msgs, eid); got["outcome"] != "cancelled" || got["flow_id"] != "fc" {
			t.Errorf("completion %v", got)
		}
	})

	t.Run("RevokedAndOverride", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		msgs := b.subscribe(model.ChannelDAGCompletions)
		eid, _ := b.claimed(nil)
		b.hset(model.KeysFor(eid).Core(), "ownership_state", "lease_revoked", "flow_id", "fx")
		_, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Source: "worker"})
		execWantCode(t, err, valkey.CodeLeaseRevoked)
		if _, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Source: valkey.SourceOperatorOverride, LeaseID: "ignored", LeaseEpoch: 9}); err != nil {
			t.Fatal(err)
		}
		if got := b.awaitCompletion(msgs, eid); got["outcome"] != "cancelled" {
			t.Errorf("completion %v", got)
		}
		// flow_cascade cancels do not publish.
		casc := b.create(nil)
		b.hset(model.KeysFor(casc).Core(), "flow_id", "fx")
		if _, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: casc, Source: "flow_cascade"}); err != nil {
			t.Fatal(err)
		}
		b.noCompletion(msgs, casc, b.eid())
	})

	t.Run("Suspended", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, _ := b.claimed(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		// Seed a suspension (ff_suspend_execution belongs to another family).
		b.hset(k.Core(), "lifecycle_phase", "suspended", "ownership_state", "unowned", "current_waitpoint_id", "wp1",
			"current_suspension_id", "s1", "attempt_state", "attempt_interrupted")
		b.hset(k.SuspensionCurrent(), "suspension_id", "s1", "additional_waitpoints_json", `[{"waitpoint_id":"wp2","waitpoint_key":"k2"}]`)
		b.hset(pk.Waitpoint("wp1"), "state", "active")
		b.hset(pk.WaitpointCondition("wp1"), "closed", "0")
		b.hset(pk.Waitpoint("wp2"), "state", "active")
		b.sadd(k.SuspensionSatisfiedSet(), "leaf:x")
		b.sadd(k.SuspensionSatisfiedSet()+":signals", "sig")
		b.hset(k.SuspensionMemberMap(), "a", "b")
		b.zadd(pk.LaneSuspended("default"), 9999999999999, string(eid))
		b.zadd(pk.SuspensionTimeout(), 5, string(eid))
		from, err := b.c.CancelExecution(b.ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Reason: "r"})
		if err != nil || from != "suspended" {
			t.Fatalf("cancel = %q, %v", from, err)
		}
		now := b.hgetall(k.Core())["completed_at"]
		execWantFields(t, "suspension", b.hgetall(k.SuspensionCurrent()), map[string]string{"closed_at": now, "close_reason": "cancelled"})
		execWantFields(t, "waitpoint", b.hgetall(pk.Waitpoint("wp1")), map[string]string{"state": "closed", "closed_at": now, "close_reason": "cancelled"})
		execWantFields(t, "condition", b.hgetall(pk.WaitpointCondition("wp1")), map[string]string{"closed": "1", "closed_at": now, "closed_reason": "cancelled"})
		execWantFields(t, "extra waitpoint", b.hgetall(pk.Waitpoint("wp2")), map[string]string{"state": "closed", "close_reason": "cancelled"})
		if b.exists(pk.WaitpointCondition("wp2")) {
			t.Error("condition created for an extra waitpoint")
		}
		for _, key := range []string{k.SuspensionSatisfiedSet(), k.SuspensionSatisfiedSet() + ":signals", k.SuspensionMemberMap()} {
			if b.exists(key) {
				t.Errorf("%s not deleted", key)
			}
		}
		for _, key := range []string{pk.LaneSuspended("default"), pk.SuspensionTimeout()} {
			if _, ok := b.zscore(key, string(eid)); ok {
				t.Errorf("still in %s", key)
			}
		}
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "ended_cancelled"})
	})
}

// reclaimable claims an execution for wi1 and marks its lease expired.
func (b *execBundle) reclaimable(p *valkey.CreateExecutionParams) (model.ExecutionID, *valkey.ClaimResult) {
	b.t.Helper()
	eid, cl := b.claimed(p)
	b.hset(model.KeysFor(eid).Core(), "ownership_state", "lease_expired_reclaimable", "lease_expired_at", "1")
	return eid, cl
}

func (b *execBundle) reclaimParams(eid model.ExecutionID) *valkey.ReclaimExecutionParams {
	return &valkey.ReclaimExecutionParams{ExecutionID: eid, WorkerID: "w2", WorkerInstanceID: "wi2",
		LaneID: "default", LeaseTTLMs: 9000}
}

func TestReclaimExecution(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, cl := b.reclaimable(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.hset(k.StreamMeta(0), "stream_id", "s")
		// Reclaim grants are not checked for expiry.
		b.hset(k.ClaimGrant(), "worker_id", "w2", "grant_expires_at", "1")
		p := b.reclaimParams(eid)
		p.LeaseID, p.AttemptID = "L2", "A2"
		res, err := b.c.ReclaimExecution(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.LeaseID != "L2" || res.LeaseEpoch != 2 || res.AttemptID != "A2" || res.AttemptIndex != 1 || res.AttemptType != "reclaim" {
			t.Fatalf("reclaim = %+v", res)
		}
		core := b.hgetall(k.Core())
		now := core["lease_acquired_at"]
		exp := strconv.FormatInt(res.ExpiresAt, 10)
		if res.ExpiresAt != execAtoi64(now)+9000 {
			t.Errorf("expires_at %d; want now+9000", res.ExpiresAt)
		}
		execWantFields(t, "core", core, map[string]string{"lifecycle_phase": "active", "ownership_state": "leased",
			"eligibility_state": "not_applicable", "blocking_reason": "none", "attempt_state": "running_attempt",
			"public_state": "active", "current_attempt_index": "1", "total_attempt_count": "2",
			"current_attempt_id": "A2", "current_lease_id": "L2", "current_lease_epoch": "2",
			"current_worker_id": "w2", "current_worker_instance_id": "wi2", "lease_expires_at": exp,
			"lease_renewal_deadline": strconv.FormatInt(execAtoi64(now)+6000, 10), "lease_expired_at": "",
			"lease_revoked_at": "", "lease_reclaim_count": "1", "last_transition_at": now})
		execWantFields(t, "old attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "interrupted_reclaimed",
			"ended_at": now, "failure_reason": "lease_lease_expired_reclaimable"})
		execWantFields(t, "old stream", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "reclaimed", "closed_at": now})
		execWantFields(t, "new attempt", b.hgetall(k.Attempt(1)), map[string]string{"attempt_id": "A2", "attempt_index": "1",
			"attempt_type": "reclaim", "attempt_state": "started", "lease_id": "L2", "lease_epoch": "2",
			"worker_id": "w2", "worker_instance_id": "wi2", "reclaim_reason": "lease_lease_expired_reclaimable",
			"previous_attempt_index": "0"})
		execWantFields(t, "usage", b.hgetall(k.AttemptUsage(1)), map[string]string{"last_usage_report_seq": "0"})
		execWantFields(t, "lease", b.hgetall(k.LeaseCurrent()), map[string]string{"lease_id": "L2", "lease_epoch": "2",
			"worker_instance_id": "wi2", "expires_at": exp})
		if b.exists(k.ClaimGrant()) {
			t.Error("grant not consumed")
		}
		if b.sismember(pk.WorkerLeases("wi1"), string(eid)) || !b.sismember(pk.WorkerLeases("wi2"), string(eid)) {
			t.Error("worker lease sets not moved")
		}
		for _, key := range []string{pk.LeaseExpiry(), pk.LaneActive("default")} {
			if s, ok := b.zscore(key, string(eid)); !ok || int64(s) != res.ExpiresAt {
				t.Errorf("%s score %v %v", key, s, ok)
			}
		}
		if _, ok := b.zscore(k.Attempts(), "1"); !ok {
			t.Error("attempt 1 not indexed")
		}
		h := b.history(eid)
		execWantFields(t, "reclaimed", h[len(h)-1], map[string]string{"event": "reclaimed", "old_lease_epoch": "1",
			"new_lease_id": "L2", "new_lease_epoch": "2", "new_attempt_id": "A2", "new_attempt_index": "1",
			"worker_id": "w2", "ts": now})
		if cl.LeaseEpoch != 1 {
			t.Errorf("first claim epoch %d", cl.LeaseEpoch)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		_, err := b.c.ReclaimExecution(b.ctx, b.reclaimParams(b.eid()))
		execWantCode(t, err, valkey.CodeExecutionNotFound)
		// Leased (not expired/revoked) and runnable executions are not reclaimable.
		leased, _ := b.claimed(nil)
		_, err = b.c.ReclaimExecution(b.ctx, b.reclaimParams(leased))
		execWantCode(t, err, valkey.CodeExecutionNotReclaimable)
		_, err = b.c.ReclaimExecution(b.ctx, b.reclaimParams(b.create(nil)))
		execWantCode(t, err, valkey.CodeExecutionNotReclaimable)
		// Grant missing, then for another worker.
		eid, _ := b.reclaimable(nil)
		_, err = b.c.ReclaimExecution(b.ctx, b.reclaimParams(eid))
		execWantCode(t, err, valkey.CodeInvalidClaimGrant)
		b.hset(model.KeysFor(eid).ClaimGrant(), "worker_id", "w9")
		_, err = b.c.ReclaimExecution(b.ctx, b.reclaimParams(eid))
		execWantCode(t, err, valkey.CodeInvalidClaimGrant)
		if !b.exists(model.KeysFor(eid).ClaimGrant()) {
			t.Error("mismatched grant consumed")
		}
		// Revoked leases are reclaimable too.
		rev, _ := b.claimed(nil)
		b.hset(model.KeysFor(rev).Core(), "ownership_state", "lease_revoked")
		b.hset(model.KeysFor(rev).ClaimGrant(), "worker_id", "w2")
		if _, err := b.c.ReclaimExecution(b.ctx, b.reclaimParams(rev)); err != nil {
			t.Fatal(err)
		}
		if a := b.hgetall(model.KeysFor(rev).Attempt(1)); a["reclaim_reason"] != "lease_lease_revoked" {
			t.Errorf("reclaim_reason = %q", a["reclaim_reason"])
		}
	})

	t.Run("Cap", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		msgs := b.subscribe(model.ChannelDAGCompletions)
		cases := []struct {
			name   string
			policy string
			count  string
			argv9  string // "" = omit ARGV[9]
			detail string
		}{
			{"PolicyCap", `{"max_reclaim_count":3}`, "3", "1000", "3"},
			{"ArgvCap", "", "2", "2", "2"},
			{"PolicyWithoutCapUsesArgv", `{"x":1}`, "5", "5", "5"},
			{"DefaultCapIs100", "", "100", "", "100"},
		}
		for _, tc := range cases {
			eid, _ := b.reclaimable(&valkey.CreateExecutionParams{PolicyJSON: tc.policy, ExecutionDeadlineAt: 1 << 50})
			k, pk := model.KeysFor(eid), b.pk(eid)
			b.hset(k.Core(), "lease_reclaim_count", tc.count, "flow_id", "fcap")
			b.hset(k.ClaimGrant(), "worker_id", "w2")
			b.zadd(pk.AttemptTimeout(), 1, string(eid))
			fc := execReclaimCall(b.reclaimParams(eid))
			if tc.argv9 == "" {
				fc.Args = fc.Args[:8]
			} else {
				fc.Args[8] = tc.argv9
			}
			_, err := b.fcall(fc)
			if le := execWantCode(t, err, valkey.CodeMaxRetriesExhausted); le.Detail(0) != tc.detail {
				t.Errorf("%s: detail %q; want %q", tc.name, le.Detail(0), tc.detail)
			}
			core := b.hgetall(k.Core())
			now := core["completed_at"]
			execWantFields(t, tc.name, core, map[string]string{"lifecycle_phase": "terminal", "ownership_state": "unowned",
				"terminal_outcome": "failed", "attempt_state": "attempt_terminal", "public_state": "failed",
				"failure_reason": "max_reclaims_exceeded", "current_lease_id": "", "current_worker_id": "",
				"current_worker_instance_id": "", "last_transition_at": now, "lease_reclaim_count": tc.count})
			if b.exists(k.LeaseCurrent()) || b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
				t.Errorf("%s: lease not cleaned", tc.name)
			}
			for _, key := range []string{pk.LeaseExpiry(), pk.LaneActive("default"), pk.AttemptTimeout(), pk.ExecutionDeadline()} {
				if _, ok := b.zscore(key, string(eid)); ok {
					t.Errorf("%s: still in %s", tc.name, key)
				}
			}
			if s, ok := b.zscore(pk.LaneTerminal("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != now {
				t.Errorf("%s: terminal %v %v", tc.name, s, ok)
			}
			if !b.exists(k.ClaimGrant()) {
				t.Errorf("%s: grant consumed on the cap path", tc.name)
			}
			b.noCompletion(msgs, eid, b.eid())
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, _ := b.reclaimable(nil)
		for _, tc := range []struct {
			idx    int
			val    string
			detail string
		}{
			{5, "ttl", "lease_ttl_ms must be a number, got: ttl"},
			{8, "many", "default_max_reclaim_count must be a number, got: many"},
			{8, "", "default_max_reclaim_count must be a number, got: "},
		} {
			c := execReclaimCall(b.reclaimParams(eid))
			c.Args[tc.idx] = tc.val
			_, err := b.fcall(c)
			if le := execWantCode(t, err, valkey.CodeInvalidInput); le.Detail(0) != tc.detail {
				t.Errorf("detail %q; want %q", le.Detail(0), tc.detail)
			}
		}
	})
}

// reclaimCall builds ff_reclaim_execution's KEYS/ARGV as the wrapper does for
// an execution whose current attempt is 0.
func execReclaimCall(p *valkey.ReclaimExecutionParams) valkey.Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	return valkey.Call{
		Function: "ff_reclaim_execution",
		Keys: []string{k.Core(), k.ClaimGrant(), k.Attempt(0), k.StreamMeta(0), k.Attempt(1), k.AttemptUsage(1),
			k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases(p.WorkerInstanceID),
			pk.LaneActive(p.LaneID), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.LaneID, "L", "9000", "A", "{}", "1000"},
	}
}

func TestExpireExecution(t *testing.T) {
	t.Parallel()

	t.Run("NotFoundAndTerminalCleanIndexes", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		gone := b.eid()
		pk := b.pk(gone)
		b.zadd(pk.AttemptTimeout(), 1, string(gone))
		b.zadd(pk.ExecutionDeadline(), 1, string(gone))
		res, err := b.c.ExpireExecution(b.ctx, &valkey.ExpireExecutionParams{ExecutionID: gone, Reason: valkey.ExpireAttemptTimeout})
		if err != nil || res.Status != "not_found_cleaned" {
			t.Fatalf("expire = %+v, %v", res, err)
		}
		if _, ok := b.zscore(pk.AttemptTimeout(), string(gone)); ok {
			t.Error("attempt_timeout not cleaned")
		}
		done, cl := b.claimed(nil)
		if err := b.c.CompleteExecution(b.ctx, &valkey.CompleteExecutionParams{ExecutionID: done, Fence: cl.Fence()}); err != nil {
			t.Fatal(err)
		}
		b.zadd(pk.ExecutionDeadline(), 1, string(done))
		res, err = b.c.ExpireExecution(b.ctx, &valkey.ExpireExecutionParams{ExecutionID: done, Reason: valkey.ExpireExecutionDeadline})
		if err != nil || res.Status != "already_terminal" || res.FromPhase != "" {
			t.Fatalf("expire terminal = %+v, %v", res, err)
		}
		if _, ok := b.zscore(b.pk(done).ExecutionDeadline(), string(done)); ok {
			t.Error("deadline not cleaned")
		}
		if core := b.hgetall(model.KeysFor(done).Core()); core["terminal_outcome"] != "success" {
			t.Error("terminal execution changed")
		}
	})

	t.Run("Active", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		msgs := b.subscribe(model.ChannelDAGCompletions)
		eid, cl := b.claimed(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.hset(k.Core(), "flow_id", "fe")
		b.hset(k.StreamMeta(0), "stream_id", "s")
		b.zadd(pk.AttemptTimeout(), 1, string(eid))
		res, err := b.c.ExpireExecution(b.ctx, &valkey.ExpireExecutionParams{ExecutionID: eid, Reason: valkey.ExpireAttemptTimeout})
		if err != nil || res.Status != "expired" || res.FromPhase != "active" {
			t.Fatalf("expire = %+v, %v", res, err)
		}
		core := b.hgetall(k.Core())
		now := core["completed_at"]
		execWantFields(t, "core", core, map[string]string{"lifecycle_phase": "terminal", "ownership_state": "unowned",
			"terminal_outcome": "expired", "attempt_state": "attempt_terminal", "public_state": "expired",
			"failure_reason": "attempt_timeout", "current_lease_id": "", "current_worker_instance_id": "",
			"lease_expires_at": "", "last_transition_at": now, "current_attempt_id": cl.AttemptID,
			// expire does not clear these.
			"lease_renewal_deadline": core["lease_renewal_deadline"]})
		if core["lease_renewal_deadline"] == "" {
			t.Error("lease_renewal_deadline cleared")
		}
		execWantFields(t, "attempt", b.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "ended_failure", "failure_reason": "attempt_timeout"})
		execWantFields(t, "stream", b.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "expired"})
		if b.exists(k.LeaseCurrent()) || b.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("lease not released from the holder's set")
		}
		for _, key := range []string{pk.LeaseExpiry(), pk.LaneActive("default"), pk.AttemptTimeout()} {
			if _, ok := b.zscore(key, string(eid)); ok {
				t.Errorf("still in %s", key)
			}
		}
		if s, ok := b.zscore(pk.LaneTerminal("default"), string(eid)); !ok || strconv.FormatInt(int64(s), 10) != now {
			t.Errorf("terminal %v %v", s, ok)
		}
		h := b.history(eid)
		execWantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "reason": "expired:attempt_timeout",
			"lease_id": cl.LeaseID, "lease_epoch": "1", "attempt_index": "0"})
		if got := b.awaitCompletion(msgs, eid); got["outcome"] != "expired" {
			t.Errorf("completion %v", got)
		}
	})

	t.Run("Suspended", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		eid, _ := b.claimed(nil)
		k, pk := model.KeysFor(eid), b.pk(eid)
		b.hset(k.Core(), "lifecycle_phase", "suspended", "current_waitpoint_id", "wp", "current_suspension_id", "s")
		b.hset(k.SuspensionCurrent(), "suspension_id", "s")
		b.hset(pk.Waitpoint("wp"), "state", "active")
		b.zadd(pk.LaneSuspended("default"), 9999999999999, string(eid))
		b.zadd(pk.SuspensionTimeout(), 1, string(eid))
		res, err := b.c.ExpireExecution(b.ctx, &valkey.ExpireExecutionParams{ExecutionID: eid, Reason: valkey.ExpireExecutionDeadline})
		if err != nil || res.FromPhase != "suspended" {
			t.Fatalf("expire = %+v, %v", res, err)
		}
		now := b.hgetall(k.Core())["completed_at"]
		execWantFields(t, "suspension", b.hgetall(k.SuspensionCurrent()), map[string]string{"closed_at": now, "close_reason": "expired:execution_deadline"})
		execWantFields(t, "core", b.hgetall(k.Core()), map[string]string{"current_waitpoint_id": "", "current_suspension_id": "", "failure_reason": "execution_deadline"})
		if wp := b.hgetall(pk.Waitpoint("wp")); wp["state"] != "active" {
			t.Error("expire closed the waitpoint")
		}
		for _, key := range []string{pk.LaneSuspended("default"), pk.SuspensionTimeout()} {
			if _, ok := b.zscore(key, string(eid)); ok {
				t.Errorf("still in %s", key)
			}
		}
	})

	t.Run("Runnable", func(t *testing.T) {
		t.Parallel()
		b := setupExec(t)
		// Delayed: removed from delayed only; attempt_state preserved.
		eid := b.create(&valkey.CreateExecutionParams{DelayUntil: b.now() + 100_000})
		pk := b.pk(eid)
		b.zadd(pk.LaneEligible("default"), 1, string(eid)) // stale entry in another index stays
		res, err := b.c.ExpireExecution(b.ctx, &valkey.ExpireExecutionParams{ExecutionID: eid, Reason: valkey.ExpireExecutionDeadline})
		if err != nil || res.FromPhase != "runnable" {
			t.Fatalf("expire = %+v, %v", res, err)
		}
		if _, ok := b.zscore(pk.LaneDelayed("default"), string(eid)); ok {
			t.Error("still delayed")
		}
		if _, ok := b.zscore(pk.LaneEligible("default"), string(eid)); !ok {
			t.Error("eligible entry removed for a delayed execution")
		}
		execWantFields(t, "core", b.hgetall(model.KeysFor(eid).Core()), map[string]string{"attempt_state": "pending_first_attempt",
			"terminal_outcome": "expired"})
		// Unknown eligibility: every runnable index is cleaned.
		other := b.create(nil)
		b.hset(model.KeysFor(other).Core(), "eligibility_state", "blocked_by_lane_state")
		idx := []string{pk.LaneEligible("default"), pk.LaneDelayed("default"), pk.LaneBlockedDependencies("default"),
			pk.LaneBlockedBudget("default"), pk.LaneBlockedQuota("default"), pk.LaneBlockedRoute("default"), pk.LaneBlockedOperator("default")}
		for _, key := range idx {
			b.zadd(key, 1, string(other))
		}
		if _, err := b.c.ExpireExecution(b.ctx, &valkey.ExpireExecutionParams{ExecutionID: other, Reason: valkey.ExpireExecutionDeadline}); err != nil {
			t.Fatal(err)
		}
		for _, key := range idx {
			if _, ok := b.zscore(key, string(other)); ok {
				t.Errorf("still in %s", key)
			}
		}
	})
}

func TestSetExecutionTags(t *testing.T) {
	t.Parallel()
	b := setupExec(t)
	eid := b.create(nil)
	k := model.KeysFor(eid)
	b.hset(k.Core(), "last_mutation_at", "1")
	n, err := b.c.SetExecutionTags(b.ctx, eid, map[string]string{"app.owner": "ann", "cairn.run.id": "7", "a_1.x": ""})
	if err != nil || n != 3 {
		t.Fatalf("SetExecutionTags = %d, %v", n, err)
	}
	execWantFields(t, "tags", b.hgetall(k.Tags()), map[string]string{"app.owner": "ann", "cairn.run.id": "7", "a_1.x": ""})
	if core := b.hgetall(k.Core()); core["last_mutation_at"] == "1" {
		t.Error("last_mutation_at not bumped")
	}

	for _, bad := range []string{"Owner.x", "app.", "app..x", "1a.b", "nodot", "app-x.y", ".x"} {
		_, err := b.c.SetExecutionTags(b.ctx, eid, map[string]string{"zz.ok": "1", bad: "v"})
		if le := execWantCode(t, err, valkey.CodeInvalidTagKey); le.Detail(0) != bad {
			t.Errorf("detail %q; want %q", le.Detail(0), bad)
		}
	}
	if _, ok := b.hgetall(k.Tags())["zz.ok"]; ok {
		t.Error("a rejected call wrote its valid pairs")
	}
	_, err = b.c.SetExecutionTags(b.ctx, b.eid(), map[string]string{"app.x": "1"})
	execWantCode(t, err, valkey.CodeExecutionNotFound)
	for _, args := range [][]string{{}, {"app.x"}, {"app.x", "1", "app.y"}} {
		_, err := b.fcall(valkey.Call{Function: "ff_set_execution_tags", Keys: []string{k.Core(), k.Tags()}, Args: args})
		if le := execWantCode(t, err, valkey.CodeInvalidInput); le.Detail(0) != "tags must be non-empty even-length key/value pairs" {
			t.Errorf("detail %q", le.Detail(0))
		}
	}
}
