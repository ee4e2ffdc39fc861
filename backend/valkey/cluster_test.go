package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/lua"
	"github.com/fabric-host/fabric/model"
)

// spread runs one create → grant → claim → complete job on each of the
// first n flow partitions, checks each ended completed, and counts the jobs
// per primary holding them (the only node where EXISTS answers 1; the
// others answer MOVED).
func spread(ctx context.Context, c *valkey.Client, lane string, n int) (map[string]int, error) {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return nil, err
	}
	perNode := map[string]int{}
	for i := 0; i < n; i++ {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i)}, model.NewUUID())
		if err := jobOn(ctx, c, id, lane); err != nil {
			return nil, fmt.Errorf("job on partition %d: %w", i, err)
		}
		core := model.KeysFor(id).Core()
		st, err := c.Raw().Do(ctx, c.Raw().B().Hget().Key(core).Field("public_state").Build()).ToString()
		if err != nil || st != "completed" {
			return nil, fmt.Errorf("%s public_state = %q, %v; want completed", id, st, err)
		}
		owner := ""
		for _, nd := range nodes {
			if k, err := nd.Client.Do(ctx, nd.Client.B().Exists().Key(core).Build()).AsInt64(); err == nil && k == 1 {
				owner = nd.Addr
			}
		}
		perNode[owner]++
	}
	return perNode, nil
}

// TestCluster runs the backend on a 3-primary cluster. The subtests share
// the package's cluster and run in order; the node restart comes last.
func TestCluster(t *testing.T) {
	cl := valkeytest.SharedCluster(t)
	c := valkeytest.ClusterClient(t)
	ctx := valkeytest.Context(t, 180*time.Second)

	t.Run("DialDetectsCluster", func(t *testing.T) {
		if !c.IsCluster() {
			t.Fatal("valkey+cluster URL did not give a cluster client")
		}
		// A plain URL naming one node is detected as a cluster too.
		one := valkeytest.Dial(t, "redis://"+cl.Addrs()[1], 0)
		if !one.IsCluster() {
			t.Fatal("redis://<cluster node> did not give a cluster client")
		}
		if _, err := valkey.Dial(ctx, valkey.ClientConfig{URL: cl.URL() + "/3"}); err == nil || !strings.Contains(err.Error(), "only database 0") {
			t.Fatalf("cluster URL with db 3: err = %v, want 'only database 0'", err)
		}
		if _, err := valkey.Dial(ctx, valkey.ClientConfig{URL: "redis://" + cl.Addrs()[0], DB: 2}); err == nil {
			t.Fatal("a cluster node with DB 2 must be refused")
		}
		// A cluster URL naming a server that is no cluster is refused.
		srv := valkeytest.Server(t)
		if _, err := valkey.Dial(ctx, valkey.ClientConfig{URL: strings.Replace(srv.URL(), "unix://", "valkey+cluster://", 1)}); err == nil {
			t.Fatal("valkey+cluster URL on a unix socket path must fail")
		}
	})

	t.Run("LibraryOnEveryPrimary", func(t *testing.T) {
		nodes, err := c.Primaries(ctx)
		if err != nil || len(nodes) != valkeytest.ClusterPrimaries {
			t.Fatalf("Primaries = %d nodes, %v; want %d", len(nodes), err, valkeytest.ClusterPrimaries)
		}
		for _, n := range nodes {
			for fn, want := range map[string]string{"ff_version": lua.Version, "fabric_version": lua.FabricVersion} {
				v, err := n.Client.Do(ctx, n.Client.B().Fcall().Function(fn).Numkeys(0).Build()).ToString()
				if err != nil || v != want {
					t.Fatalf("%s on %s = %q, %v; want %s", fn, n.Addr, v, err, want)
				}
			}
		}
		if v, err := c.LibraryVersion(ctx); err != nil || v != lua.Version {
			t.Fatalf("LibraryVersion = %q, %v", v, err)
		}
		if act, err := c.EnsureLibrary(ctx); err != nil || act != valkey.LibraryUpToDate {
			t.Fatalf("EnsureLibrary on a loaded cluster = %s, %v", act, err)
		}
	})

	t.Run("CallsLandOnEveryPrimary", func(t *testing.T) {
		perNode, err := spread(ctx, c, "cl-spread", 24)
		if err != nil {
			t.Fatal(err)
		}
		if len(perNode) != valkeytest.ClusterPrimaries || perNode[""] > 0 {
			t.Fatalf("executions per primary = %v; want all %d primaries, none unlocated", perNode, valkeytest.ClusterPrimaries)
		}
	})

	t.Run("CrossSlotCallsRefusedAlone", func(t *testing.T) {
		on := func(i uint16) model.ExecKeys {
			return model.KeysFor(model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: i}, model.NewUUID()))
		}
		a, b := on(0), on(1)
		if valkey.KeySlot(a.Core()) == valkey.KeySlot(b.Core()) {
			t.Fatal("partitions 0 and 1 share a slot")
		}
		if _, err := c.FCall(ctx, "ff_update_progress", []string{a.Core(), b.Core()}, []string{"x", "y", "1", "", ""}); !errors.Is(err, valkey.ErrCrossSlot) {
			t.Fatalf("cross-slot FCall: err = %v, want ErrCrossSlot", err)
		}
		// A batch mixing a keyless call, keyed calls on several slots and a
		// cross-slot call: only the cross-slot one fails.
		res := c.FCallBatch(ctx, []valkey.Call{
			{Function: "ff_version"},
			{Function: "ff_update_progress", Keys: []string{a.Core()}, Args: []string{"x", "y", "1", "", ""}},
			{Function: "ff_update_progress", Keys: []string{a.Core(), b.Core()}, Args: []string{"x", "y", "1", "", ""}},
			{Function: "ff_update_progress", Keys: []string{b.Core()}, Args: []string{"x", "y", "1", "", ""}},
		})
		if !errors.Is(res[2].Err, valkey.ErrCrossSlot) {
			t.Fatalf("cross-slot call in a batch: err = %v", res[2].Err)
		}
		for _, i := range []int{1, 3} {
			if valkey.CodeOf(res[i].Err) != valkey.CodeExecutionNotFound {
				t.Fatalf("call %d: err = %v, want execution_not_found", i, res[i].Err)
			}
		}
		if res[0].Err == nil {
			t.Fatal("ff_version does not follow the {1,...} reply convention; its decode should fail")
		}
		if strings.Contains(res[0].Err.Error(), "CROSSSLOT") {
			t.Fatalf("keyless call refused: %v", res[0].Err)
		}
	})

	t.Run("PipelineMixingKeylessAndSlots", func(t *testing.T) {
		// valkey-go panics on such a pipeline; Raw splits it.
		raw := c.Raw()
		k0 := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 0}).LaneEligible("none")
		k1 := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 1}).LaneEligible("none")
		res := raw.DoMulti(ctx, raw.B().Zcard().Key(k0).Build(), raw.B().Time().Build(), raw.B().Zcard().Key(k1).Build())
		if n, err := res[0].AsInt64(); err != nil || n != 0 {
			t.Fatalf("ZCARD %s = %d, %v", k0, n, err)
		}
		if tm, err := res[1].AsIntSlice(); err != nil || len(tm) != 2 {
			t.Fatalf("TIME = %v, %v", tm, err)
		}
		if n, err := res[2].AsInt64(); err != nil || n != 0 {
			t.Fatalf("ZCARD %s = %d, %v", k1, n, err)
		}
	})

	t.Run("WorkerRegistry", func(t *testing.T) {
		p := &valkey.RegisterWorkerParams{Namespace: "cl", InstanceID: model.NewUUID().String(), WorkerID: "w",
			Lanes: []string{"b", "a"}, Capabilities: []string{"gpu"}, TTLMs: 30000, NowMs: 1000}
		for i, want := range []string{valkey.WorkerRegistered, valkey.WorkerRefreshed} {
			got, err := c.RegisterWorker(ctx, p)
			if err != nil || got != want {
				t.Fatalf("RegisterWorker #%d = %q, %v; want %s", i+1, got, err, want)
			}
		}
		hb, err := c.HeartbeatWorker(ctx, "cl", p.InstanceID, 2000)
		if err != nil || !hb.Registered || hb.TTLMs != 30000 || hb.NextExpiryMs != 32000 {
			t.Fatalf("HeartbeatWorker = %+v, %v", hb, err)
		}
		caps, err := c.Raw().Do(ctx, c.Raw().B().Hgetall().Key(model.WorkerCapsKey("cl", p.InstanceID)).Build()).AsStrMap()
		if err != nil || caps["lanes_csv"] != "a,b" || caps["last_heartbeat_ms"] != "2000" || caps["registered_at_ms"] != "1000" {
			t.Fatalf("caps hash = %v, %v", caps, err)
		}
		if ok, err := c.Raw().Do(ctx, c.Raw().B().Sismember().Key(model.WorkersIndexKey("cl")).Member(p.InstanceID).Build()).AsBool(); err != nil || !ok {
			t.Fatalf("instance not in workers index: %v %v", ok, err)
		}
		if hb, err := c.HeartbeatWorker(ctx, "cl", "nobody", 2000); err != nil || hb.Registered {
			t.Fatalf("heartbeat of an unregistered instance = %+v, %v", hb, err)
		}
	})

	t.Run("ReloadAfterFlushOnOneNode", func(t *testing.T) {
		nodes, err := c.Primaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		victim := nodes[1]
		if err := victim.Client.Do(ctx, victim.Client.B().FunctionFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// Jobs on every partition: those on the flushed node find the
		// library missing, reload it there and succeed.
		perNode, err := spread(ctx, c, "cl-flush", 24)
		if err != nil {
			t.Fatal(err)
		}
		if perNode[victim.Addr] == 0 {
			t.Fatalf("no job landed on the flushed node %s: %v", victim.Addr, perNode)
		}
		v, err := victim.Client.Do(ctx, victim.Client.B().Fcall().Function("ff_version").Numkeys(0).Build()).ToString()
		if err != nil || v != lua.Version {
			t.Fatalf("ff_version on the flushed node after reload = %q, %v", v, err)
		}
	})

	t.Run("KeyeventWatchNoticesAPrimaryWithoutFlags", func(t *testing.T) {
		// A primary restarted on its old address comes back without the
		// notify flags, and one that came up between setting the flags and
		// subscribing never got them: the watch ends so that its caller
		// sets them and subscribes again.
		if err := c.EnableZaddKeyevents(ctx); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		up := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.WatchZaddKeyevents(wctx, func(string) {}, func() { close(up) })
		}()
		select {
		case <-up:
		case err := <-done:
			t.Fatalf("watch ended before it was up: %v", err)
		case <-ctx.Done():
			t.Fatal("watch never came up")
		}
		nc, err := cl.NodeClient(2)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := nc.Do(ctx, nc.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, valkey.ErrPrimariesChanged) || !strings.Contains(err.Error(), cl.Addrs()[2]) {
				t.Fatalf("watch ended with %v; want ErrPrimariesChanged naming %s", err, cl.Addrs()[2])
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watch did not notice a primary without the zadd keyevent flags within 30s")
		}
		// Setting them again restores every node.
		if err := c.EnableZaddKeyevents(ctx); err != nil {
			t.Fatal(err)
		}
		kv, err := nc.Do(ctx, nc.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
		if err != nil || !strings.Contains(kv["notify-keyspace-events"], "E") {
			t.Fatalf("flags after EnableZaddKeyevents: %v %v", kv, err)
		}
	})

	t.Run("RestartedPrimaryGetsLibraryBack", func(t *testing.T) {
		if err := cl.RestartNode(ctx, 2); err != nil {
			t.Fatal(err)
		}
		addr := cl.Addrs()[2]
		// The restarted node is empty: the first call there reloads both
		// libraries; work continues on every partition.
		var last error
		valkeytest.Eventually(t, 60*time.Second, "jobs succeed on every primary after the restart", func() bool {
			perNode, err := spread(ctx, c, "cl-restart", 24)
			last = err
			return err == nil && perNode[addr] > 0
		})
		if last != nil {
			t.Logf("first attempts failed while the node rejoined, e.g. %v", last)
		}
		if v, err := c.LibraryVersion(ctx); err != nil || v != lua.Version {
			t.Fatalf("LibraryVersion after restart = %q, %v", v, err)
		}
	})
}
