package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// schedEnv bundles what the scheduling/lease tests use.
type schedEnv struct {
	t   *testing.T
	c   *valkey.Client
	ctx context.Context
}

func newSchedEnv(t *testing.T) *schedEnv {
	t.Helper()
	return &schedEnv{t: t, c: valkeytest.Client(t), ctx: valkeytest.Context(t, 20*time.Second)}
}

func (e *schedEnv) newEID() model.ExecutionID {
	return model.DefaultPartitionConfig().NewSoloExecutionID("default")
}

func (e *schedEnv) now() int64 {
	e.t.Helper()
	n, err := e.c.ServerTime(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// seedRunnable writes exec_core the way ff_create_execution does (§4.4 /
// §4.5, no delay) and indexes it in lane:eligible. over overrides fields.
func (e *schedEnv) seedRunnable(eid model.ExecutionID, lane string, over map[string]string) map[string]string {
	e.t.Helper()
	now := e.now()
	f := map[string]string{
		"execution_id": string(eid), "namespace": "ns", "lane_id": lane, "execution_kind": "k",
		"partition_id": strconv.Itoa(int(eid.Partition().Index)), "priority": "0", "creator_identity": "t",
		"lifecycle_phase": "runnable", "ownership_state": "unowned", "eligibility_state": "eligible_now",
		"blocking_reason": "waiting_for_worker", "blocking_detail": "", "terminal_outcome": "none",
		"attempt_state": "pending_first_attempt", "public_state": "waiting",
		"total_attempt_count": "0", "current_attempt_index": "", "current_attempt_id": "",
		"current_lease_id": "", "current_lease_epoch": "0", "current_worker_id": "",
		"current_worker_instance_id": "", "current_lane": lane, "retry_count": "0", "replay_count": "0",
		"lease_reclaim_count": "0", "created_at": strconv.FormatInt(now, 10), "started_at": "",
		"completed_at": "", "last_transition_at": strconv.FormatInt(now, 10),
		"last_mutation_at": strconv.FormatInt(now, 10), "lease_acquired_at": "", "lease_expires_at": "",
		"lease_last_renewed_at": "", "lease_renewal_deadline": "", "lease_expired_at": "",
		"lease_revoked_at": "", "lease_revoke_reason": "", "delay_until": "", "current_suspension_id": "",
		"current_waitpoint_id": "", "pending_retry_reason": "", "pending_replay_reason": "",
		"pending_replay_requested_by": "", "pending_previous_attempt_index": "", "progress_pct": "",
		"progress_message": "", "progress_updated_at": "", "flow_id": "",
	}
	for k, v := range over {
		f[k] = v
	}
	e.hset(model.KeysFor(eid).Core(), f)
	if f["eligibility_state"] == "eligible_now" && f["lifecycle_phase"] == "runnable" {
		p, _ := strconv.ParseFloat(f["priority"], 64)
		ca, _ := strconv.ParseFloat(f["created_at"], 64)
		e.zadd(model.KeysOn(eid.Partition()).LaneEligible(lane), -p*1e12+ca, string(eid))
	}
	return f
}

// seedDelayed seeds a delayed execution (create with future delay_until).
func (e *schedEnv) seedDelayed(eid model.ExecutionID, lane string, delayUntil int64, over map[string]string) map[string]string {
	e.t.Helper()
	f := map[string]string{
		"eligibility_state": "not_eligible_until_time", "blocking_reason": "waiting_for_delay",
		"blocking_detail": "delayed until " + strconv.FormatInt(delayUntil, 10), "public_state": "delayed",
		"delay_until": strconv.FormatInt(delayUntil, 10),
	}
	for k, v := range over {
		f[k] = v
	}
	out := e.seedRunnable(eid, lane, f)
	e.zadd(model.KeysOn(eid.Partition()).LaneDelayed(lane), float64(delayUntil), string(eid))
	return out
}

func (e *schedEnv) hset(key string, f map[string]string) {
	e.t.Helper()
	cmd := e.c.Raw().B().Hset().Key(key).FieldValue()
	for k, v := range f {
		cmd = cmd.FieldValue(k, v)
	}
	if err := e.c.Raw().Do(e.ctx, cmd.Build()).Error(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *schedEnv) hgetall(key string) map[string]string {
	e.t.Helper()
	m, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *schedEnv) zadd(key string, score float64, member string) {
	e.t.Helper()
	if err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Zadd().Key(key).ScoreMember().ScoreMember(score, member).Build()).Error(); err != nil {
		e.t.Fatal(err)
	}
}

// zscore returns the member's score and whether it is a member.
func (e *schedEnv) zscore(key, member string) (float64, bool) {
	e.t.Helper()
	f, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Zscore().Key(key).Member(member).Build()).AsFloat64()
	if err != nil {
		if schedIsNil(err) {
			return 0, false
		}
		e.t.Fatal(err)
	}
	return f, true
}

func (e *schedEnv) sismember(key, member string) bool {
	e.t.Helper()
	b, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Sismember().Key(key).Member(member).Build()).AsBool()
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *schedEnv) exists(key string) bool {
	e.t.Helper()
	n, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n == 1
}

// pexpiretime is PEXPIRETIME: -1 no TTL, -2 missing.
func (e *schedEnv) pexpiretime(key string) int64 {
	e.t.Helper()
	n, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Arbitrary("PEXPIRETIME").Keys(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *schedEnv) pttl(key string) int64 {
	e.t.Helper()
	n, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *schedEnv) get(key string) string {
	e.t.Helper()
	s, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Get().Key(key).Build()).ToString()
	if err != nil && !schedIsNil(err) {
		e.t.Fatal(err)
	}
	return s
}

// xrange returns the entries of a stream as field maps, oldest first.
func (e *schedEnv) xrange(key string) []map[string]string {
	e.t.Helper()
	entries, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]map[string]string, len(entries))
	for i, en := range entries {
		out[i] = en.FieldValues
	}
	return out
}

// fcallRaw runs an FCALL and fails the test on a transport or Lua runtime
// error, returning the decoded reply or logical error.
func (e *schedEnv) fcall(fn string, keys, args []string) (*valkey.Reply, error) {
	e.t.Helper()
	rep, err := e.c.FCall(e.ctx, fn, keys, args)
	if err != nil && valkey.CodeOf(err) == "" {
		e.t.Fatalf("%s: not a clean reply: %v", fn, err)
	}
	return rep, err
}

// wantCode fails unless err is the logical error code.
func schedWantCode(t *testing.T, err error, code valkey.ErrorCode) *valkey.LuaError {
	t.Helper()
	if !errors.Is(err, code) {
		t.Fatalf("error = %v, want %s", err, code)
	}
	var le *valkey.LuaError
	errors.As(err, &le)
	return le
}

func schedWantFields(t *testing.T, what string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if gv, ok := got[k]; !ok || gv != v {
			t.Errorf("%s: field %s = %q (present %v), want %q", what, k, gv, ok, v)
		}
	}
}

func schedIsNil(err error) bool { return vk.IsValkeyNil(err) }
