package valkey_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/lua"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// keyspace is every key's type and DUMP, to compare two moments.
func keyspace(t *testing.T, ctx context.Context, raw vk.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	var cursor uint64
	for {
		e, err := raw.Do(ctx, raw.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			d, err := raw.Do(ctx, raw.B().Dump().Key(k).Build()).ToString()
			if err != nil && !vk.IsValkeyNil(err) {
				t.Fatal(err)
			}
			out[k] = d
		}
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

// Every ff_* function called with missing KEYS (none, or only an
// execution's core key) or no ARGV returns an error and leaves the
// keyspace exactly as it was: a call with bad input writes nothing.
func TestEveryFunctionRefusesMissingKeys(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	raw := c.Raw()
	// Something to damage: an execution, a flow with a member, a budget.
	id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 3}, model.NewUUID())
	if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "l",
		ExecutionKind: "k", Priority: 1, CreatorIdentity: "test", Payload: "p", PolicyJSON: "{}"}); err != nil {
		t.Fatal(err)
	}
	flow, _ := famFlow(t, c)
	famMember(t, c, flow, "l", 1)
	core := model.KeysFor(id).Core()
	before := keyspace(t, ctx, raw)
	var wrote, accepted []string
	// Whole calls already: no KEYS and no ARGV, or one KEY and no ARGV
	// (read-only).
	complete := map[string]int{"ff_version": 0, "ff_list_waitpoint_hmac_kids": 1, "ff_read_summary": 1}
	for _, fn := range lua.Functions() {
		for _, keys := range [][]string{nil, {core}} {
			if n, ok := complete[fn]; ok && len(keys) >= n {
				continue
			}
			reply := raw.Do(ctx, raw.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Build())
			refused := reply.Error() != nil
			if arr, err := reply.ToArray(); err == nil && len(arr) > 0 {
				if n, err := arr[0].AsInt64(); err == nil && n == 0 {
					refused = true
				}
			}
			if !refused {
				accepted = append(accepted, fmt.Sprintf("%s with %d keys: %v", fn, len(keys), reply))
			}
			if after := keyspace(t, ctx, raw); !sameKeyspace(before, after) {
				wrote = append(wrote, fmt.Sprintf("%s with %d keys: %s", fn, len(keys), diffKeys(before, after)))
				before = after
			}
		}
	}
	// The case a differential run found: a create whose last KEYS entry
	// is missing wrote the core, then failed; a retry answered DUPLICATE.
	other := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 3}, model.NewUUID())
	call := (&valkey.CreateExecutionParams{ExecutionID: other, Namespace: "ns", LaneID: "l", ExecutionKind: "k",
		CreatorIdentity: "test", PolicyJSON: "{}"}).Call()
	for n := range len(call.Keys) {
		reply := raw.Do(ctx, raw.B().Fcall().Function(call.Function).Numkeys(int64(n)).Key(call.Keys[:n]...).Arg(call.Args...).Build())
		if arr, err := reply.ToArray(); err != nil || len(arr) == 0 {
			t.Errorf("create with %d of %d keys: %v", n, len(call.Keys), reply)
		} else if ok, _ := arr[0].AsInt64(); ok != 0 {
			t.Errorf("create with %d of %d keys accepted: %v", n, len(call.Keys), reply)
		}
		if after := keyspace(t, ctx, raw); !sameKeyspace(before, after) {
			wrote = append(wrote, fmt.Sprintf("create with %d of %d keys: %s", n, len(call.Keys), diffKeys(before, after)))
			before = after
		}
	}
	if len(wrote) > 0 {
		t.Errorf("functions that wrote on a call with missing KEYS or ARGV:\n%s", strings.Join(wrote, "\n"))
	}
	if len(accepted) > 0 {
		t.Errorf("functions that accepted a call with missing KEYS or ARGV:\n%s", strings.Join(accepted, "\n"))
	}
}

func sameKeyspace(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffKeys(a, b map[string]string) string {
	var d []string
	for k, v := range b {
		if w, ok := a[k]; !ok {
			d = append(d, "+"+k)
		} else if w != v {
			d = append(d, "~"+k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			d = append(d, "-"+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, " ")
}
