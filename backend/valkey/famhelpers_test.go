package valkey_test

// Test helpers of the budget / quota / flow family tests (prefixed fam to
// stay clear of other families' helpers in this package).

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// famHash returns HGETALL key.
func famHash(t *testing.T, c *valkey.Client, key string) map[string]string {
	t.Helper()
	m, err := c.Raw().Do(context.Background(), c.Raw().B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

// famWantFields asserts that every field of want has that value in key.
func famWantFields(t *testing.T, c *valkey.Client, key string, want map[string]string) {
	t.Helper()
	got := famHash(t, c, key)
	for f, v := range want {
		if got[f] != v {
			t.Errorf("%s field %s = %q, want %q", key, f, got[f], v)
		}
	}
}

// famScore returns ZSCORE key member and whether it is present.
func famScore(t *testing.T, c *valkey.Client, key, member string) (float64, bool) {
	t.Helper()
	r := c.Raw().Do(context.Background(), c.Raw().B().Zscore().Key(key).Member(member).Build())
	if r.Error() != nil {
		if famIsNil(r.Error()) {
			return 0, false
		}
		t.Fatalf("ZSCORE %s: %v", key, r.Error())
	}
	f, err := r.AsFloat64()
	if err != nil {
		return 0, false
	}
	return f, true
}

func famIsNil(err error) bool { return vk.IsValkeyNil(err) }

// famMembers returns SMEMBERS key.
func famMembers(t *testing.T, c *valkey.Client, key string) []string {
	t.Helper()
	m, err := c.Raw().Do(context.Background(), c.Raw().B().Smembers().Key(key).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("SMEMBERS %s: %v", key, err)
	}
	return m
}

// famIsMember reports SISMEMBER key member.
func famIsMember(t *testing.T, c *valkey.Client, key, member string) bool {
	t.Helper()
	b, err := c.Raw().Do(context.Background(), c.Raw().B().Sismember().Key(key).Member(member).Build()).AsBool()
	if err != nil {
		t.Fatalf("SISMEMBER %s: %v", key, err)
	}
	return b
}

// famExists reports EXISTS key.
func famExists(t *testing.T, c *valkey.Client, key string) bool {
	t.Helper()
	n, err := c.Raw().Do(context.Background(), c.Raw().B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// famGet returns GET key ("" when absent).
func famGet(t *testing.T, c *valkey.Client, key string) string {
	t.Helper()
	s, err := c.Raw().Do(context.Background(), c.Raw().B().Get().Key(key).Build()).ToString()
	if err != nil && !famIsNil(err) {
		t.Fatalf("GET %s: %v", key, err)
	}
	return s
}

// famPTTL returns PTTL key.
func famPTTL(t *testing.T, c *valkey.Client, key string) int64 {
	t.Helper()
	n, err := c.Raw().Do(context.Background(), c.Raw().B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return n
}

// famHSet writes pairs into key.
func famHSet(t *testing.T, c *valkey.Client, key string, pairs ...string) {
	t.Helper()
	cmd := c.Raw().B().Hset().Key(key).FieldValue()
	for i := 0; i+1 < len(pairs); i += 2 {
		cmd = cmd.FieldValue(pairs[i], pairs[i+1])
	}
	if err := c.Raw().Do(context.Background(), cmd.Build()).Error(); err != nil {
		t.Fatalf("HSET %s: %v", key, err)
	}
}

// famRaw runs FCALL and returns the raw reply as nested Go values
// (strings, int64s and slices), for asserting exact wire shapes.
func famRaw(t *testing.T, c *valkey.Client, fn string, keys, args []string) []any {
	t.Helper()
	msg, err := c.FCallRaw(context.Background(), fn, keys, args)
	if err != nil {
		t.Fatalf("FCALL %s: %v", fn, err)
	}
	arr, err := msg.ToArray()
	if err != nil {
		t.Fatalf("FCALL %s: reply is not an array: %v", fn, err)
	}
	out := make([]any, len(arr))
	for i, m := range arr {
		if n, err := m.AsInt64(); err == nil && m.IsInt64() {
			out[i] = n
			continue
		}
		s, _ := m.ToString()
		out[i] = s
	}
	return out
}

// famWantRaw asserts the exact reply of an FCALL.
func famWantRaw(t *testing.T, c *valkey.Client, fn string, keys, args []string, want ...any) {
	t.Helper()
	got := famRaw(t, c, fn, keys, args)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s reply = %#v, want %#v", fn, got, want)
	}
}

// famWantCode asserts err is a *LuaError with code.
func famWantCode(t *testing.T, err error, code valkey.ErrorCode) {
	t.Helper()
	if !errors.Is(err, code) {
		t.Fatalf("error = %v, want code %s", err, code)
	}
}

// famSeedExec writes a runnable, eligible exec_core the way
// ff_create_execution leaves it (the subset of fields these families
// read), indexes it in lane eligible, and applies overrides.
func famSeedExec(t *testing.T, c *valkey.Client, eid model.ExecutionID, lane string, createdAt int64, overrides ...string) {
	t.Helper()
	pairs := []string{
		"execution_id", string(eid), "namespace", "ns", "lane_id", lane, "priority", "0",
		"lifecycle_phase", "runnable", "ownership_state", "unowned",
		"eligibility_state", "eligible_now", "blocking_reason", "waiting_for_worker",
		"blocking_detail", "", "terminal_outcome", "none",
		"attempt_state", "pending_first_attempt", "public_state", "waiting",
		"current_attempt_index", "", "current_attempt_id", "", "current_lease_epoch", "0",
		"replay_count", "0", "created_at", strconv.FormatInt(createdAt, 10), "completed_at", "",
		"flow_id", "",
	}
	pairs = append(pairs, overrides...)
	famHSet(t, c, model.KeysFor(eid).Core(), pairs...)
	pk := model.KeysOn(eid.Partition())
	err := c.Raw().Do(context.Background(), c.Raw().B().Zadd().Key(pk.LaneEligible(lane)).ScoreMember().
		ScoreMember(float64(createdAt), string(eid)).Build()).Error()
	if err != nil {
		t.Fatal(err)
	}
}

// famCodeIs reports whether err carries code.
func famCodeIs(err error, code valkey.ErrorCode) bool { return errors.Is(err, code) }

// famD builds a UsageDelta.
func famD(dim string, n int64) valkey.UsageDelta { return valkey.UsageDelta{Dimension: dim, Delta: n} }
