package host_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// The plugins' cascade (pdk/flowlib, here through a NativeHost) and the
// backend's Client.CascadeCompletion leave the same keyspace on the same
// graph: two databases get identical ids, one cascades natively, the other
// through flowlib, and every key the cascade touches is compared.
func TestCascadeParityWithClient(t *testing.T) {
	t.Parallel()
	flow := model.NewUUID()
	fp := flowParts.FlowPartition(flow)
	ids := make([]model.ExecutionID, 7)
	for i := range ids {
		ids[i] = model.NewExecutionID(fp, model.NewUUID())
	}
	a, b, c, d, y, z, w := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	type edge struct {
		id       model.UUID
		up, down model.ExecutionID
	}
	// a→b→d, a→c, y→c, y→z→w; c is an any_of group with cancel_remaining.
	edges := []edge{{model.NewUUID(), a, b}, {model.NewUUID(), b, d}, {model.NewUUID(), a, c},
		{model.NewUUID(), y, c}, {model.NewUUID(), y, z}, {model.NewUUID(), z, w}}
	const now = 1_900_000_000_000
	build := func() *flowEnv {
		e := setupFlowEnv(t, flowOpts{})
		if _, err := e.c.CreateFlow(e.ctx, flow, "dag", "ns", 0); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if _, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "default", ExecutionKind: "k"}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.c.AddExecutionToFlow(e.ctx, flow, id, 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.c.SetEdgeGroupPolicy(e.ctx, flow, c, valkey.EdgeGroupAnyOf, valkey.OnSatisfiedCancelRemain, 0, 0); err != nil {
			t.Fatal(err)
		}
		rev := e.revision(flow)
		for _, ed := range edges {
			p := &valkey.EdgeParams{Flow: flow, EdgeID: ed.id, Upstream: ed.up, Downstream: ed.down, GraphRevision: rev, NowMs: now}
			var err error
			if rev, err = e.c.StageDependencyEdge(e.ctx, p); err != nil {
				t.Fatal(err)
			}
			p.GraphRevision = rev
			if _, _, err := e.c.ApplyDependencyToChild(e.ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		e.complete(a)
		e.fail(y)
		return e
	}
	native, plugin := build(), build()
	for _, up := range []model.ExecutionID{a, y} {
		if _, err := native.c.CascadeCompletion(native.ctx, flow, up, now); err != nil {
			t.Fatal(err)
		}
		st := flowlib.Cascade(host.NewNativeHost(plugin.ctx, plugin.c, nil), flowParts, up, flow.String(), now)
		if st.Errors != 0 {
			t.Fatalf("flowlib cascade of %s: %+v", up, st)
		}
	}
	// Sanity: the cascade did something in both.
	if plugin.core(w, "terminal_outcome") != "skipped" || !plugin.eligible(c) || !plugin.eligible(b) {
		t.Fatalf("flowlib cascade incomplete: w=%q", plugin.core(w, "terminal_outcome"))
	}
	fk := model.FlowKeysFor(fp, flow)
	pk := model.KeysOn(fp)
	var keys []string
	for _, id := range []model.ExecutionID{b, c, d, z, w} { // not a, y: worker-completed, server-time stamps
		ek := model.KeysFor(id)
		keys = append(keys, ek.Core(), ek.DepsMeta(), ek.Payload(), fk.EdgeGroup(id))
	}
	for _, ed := range edges {
		keys = append(keys, model.KeysFor(ed.down).DepEdge(ed.id.String()))
	}
	keys = append(keys, pk.PendingCancelGroups(), pk.LaneEligible("default"), pk.LaneTerminal("default"), pk.LaneBlockedDependencies("default"))
	for _, k := range keys {
		if got, want := dumpKey(plugin, k), dumpKey(native, k); got != want {
			t.Errorf("%s:\n flowlib %s\n native  %s", k, got, want)
		}
	}
}

// dumpKey renders a key's content (hash fields except creation-time
// stamps, set/zset members without scores) for comparison.
func dumpKey(e *flowEnv, key string) string {
	r := e.c.Raw()
	typ, _ := r.Do(e.ctx, r.B().Type().Key(key).Build()).ToString()
	var parts []string
	switch typ {
	case "hash":
		m, _ := r.Do(e.ctx, r.B().Hgetall().Key(key).Build()).AsStrMap()
		for f, v := range m {
			if f == "created_at" || f == "last_transition_at" || f == "last_mutation_at" || f == "updated_at" {
				continue
			}
			parts = append(parts, f+"="+v)
		}
	case "set":
		parts, _ = r.Do(e.ctx, r.B().Smembers().Key(key).Build()).AsStrSlice()
	case "zset":
		parts, _ = r.Do(e.ctx, r.B().Zrange().Key(key).Min("0").Max("-1").Build()).AsStrSlice()
	case "string":
		v, _ := r.Do(e.ctx, r.B().Get().Key(key).Build()).ToString()
		parts = []string{v}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s[%s]", typ, strings.Join(parts, " "))
}
