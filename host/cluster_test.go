package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// clusterEnv is a host running the full plugin set (DefaultPlugins and
// FlowEnginePlugins, the built .wasm) on the test binary's 3-primary
// cluster, with the completion listener and due-time timers on.
type clusterEnv struct {
	*flowEnv
	cl *valkeytest.Cluster
}

// flowClusterClient dials the package's shared cluster cl with flowParts
// and bootstraps it. Every host test on the shared cluster goes through
// it: the first bootstrap fixes the deployment's partition counts for all.
func flowClusterClient(t *testing.T, ctx context.Context, cl *valkeytest.Cluster) *valkey.Client {
	t.Helper()
	c, err := valkey.Dial(ctx, valkey.ClientConfig{URL: cl.URL(), Partitions: flowParts, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func setupClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	cl := valkeytest.SharedCluster(t)
	ctx := valkeytest.Context(t, 8*time.Minute)
	c := flowClusterClient(t, ctx, cl)
	dir := t.TempDir()
	plugins := map[string]host.PluginConfig{}
	for _, name := range append(append([]string{}, host.DefaultPlugins...), host.FlowEnginePlugins...) {
		copyFile(t, fixture(t, name), filepath.Join(dir, name+".wasm"))
		plugins[name] = host.PluginConfig{Interval: 100 * time.Millisecond}
	}
	// Edges are resolved by the dependency dispatcher (completions
	// published on whichever node owns the flow reach the listener's
	// node); the reconciler sweeps every 5 s, the safety net for a
	// completion lost around a primary's restart (seen under load: one
	// published on the restarted node sometimes never reaches the
	// listener on another primary, although a probe PUBLISH from it does).
	plugins["dependency_reconciler"] = host.PluginConfig{Interval: 5 * time.Second}
	plugins["edge_cancel"] = host.PluginConfig{}
	plugins["dependency"] = host.PluginConfig{}
	logs := &logBuffer{}
	sig := &host.CompletionSignals{}
	sig.Init()
	h, err := host.New(host.Config{
		PluginDir: dir, CacheDir: cacheDir, Backend: c,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Partitions: flowParts, Plugins: plugins,
		Completions: host.CompletionConfig{Enabled: true, Signals: sig, RetryDelay: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host log (subscriptions, cluster, warnings):\n%s", logs.Grep(200, "wake", "cluster", "subscri", "level=WARN", "level=ERROR"))
		}
	})
	select {
	case <-h.Started():
	case <-time.After(6 * time.Minute):
		t.Fatal("host did not load the full plugin set within 6 minutes")
	}
	for name := range plugins {
		if st, ok := h.Plugin(name); !ok || st.State != host.StateRunning {
			t.Fatalf("%s is not running: %+v", name, st)
		}
	}
	e := &flowEnv{t: t, c: c, h: h, sig: sig, ctx: ctx, logs: logs}
	if n := sig.Subscribed.WaitOrTimeout(t); n != 1 {
		t.Fatalf("first subscription count %d", n)
	}
	return &clusterEnv{flowEnv: e, cl: cl}
}

// nodeOf is the index of the primary serving key.
func (e *clusterEnv) nodeOf(key string) int {
	e.t.Helper()
	i, err := e.cl.NodeOf(e.ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return i
}

// partitionsByNode maps each primary to the flow partitions it serves.
func (e *clusterEnv) partitionsByNode() map[int][]model.Partition {
	e.t.Helper()
	out := map[int][]model.Partition{}
	for i := range flowParts.Flow {
		p := model.Partition{Family: model.FamilyFlow, Index: i}
		n := e.nodeOf(model.KeysOn(p).LaneEligible("default"))
		out[n] = append(out[n], p)
	}
	if len(out) != valkeytest.ClusterPrimaries {
		e.t.Fatalf("the %d flow partitions cover %d primaries, want %d: %v", flowParts.Flow, len(out), valkeytest.ClusterPrimaries, out)
	}
	return out
}

// wakeSubscribed reports whether node i has the host's due-timer
// subscription (zadd keyevents of db 0) and the notify flags it needs.
func (e *clusterEnv) wakeSubscribed(i int) bool {
	nc, err := e.cl.NodeClient(i)
	if err != nil {
		return false
	}
	defer nc.Close()
	subs, err := nc.Do(e.ctx, nc.B().PubsubNumsub().Channel("__keyevent@0__:zadd").Build()).AsIntMap()
	if err != nil || subs["__keyevent@0__:zadd"] < 1 {
		return false
	}
	kv, err := nc.Do(e.ctx, nc.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	flags := kv["notify-keyspace-events"]
	return err == nil && strings.Contains(flags, "E") && (strings.Contains(flags, "z") || strings.Contains(flags, "A"))
}

// listenerSubscribed reports whether a primary has a subscriber of the
// completions channel.
func (e *clusterEnv) listenerSubscribed() bool {
	for i := range e.cl.Nodes {
		nc, err := e.cl.NodeClient(i)
		if err != nil {
			return false
		}
		subs, err := nc.Do(e.ctx, nc.B().PubsubNumsub().Channel(model.ChannelDAGCompletions).Build()).AsIntMap()
		nc.Close()
		if err == nil && subs[model.ChannelDAGCompletions] > 0 {
			return true
		}
	}
	return false
}

// waitPublishReaches waits until a PUBLISH on node from is heard by a
// subscriber on every other primary.
func (e *clusterEnv) waitPublishReaches(from int) {
	e.t.Helper()
	const channel = "fabric:test:bus-probe"
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	var heard []chan struct{}
	for j := range e.cl.Nodes {
		if j == from {
			continue
		}
		nc, err := e.cl.NodeClient(j)
		if err != nil {
			e.t.Fatal(err)
		}
		defer nc.Close()
		ch := make(chan struct{})
		heard = append(heard, ch)
		var once sync.Once
		go nc.Receive(ctx, nc.B().Subscribe().Channel(channel).Build(), func(vk.PubSubMessage) { once.Do(func() { close(ch) }) })
	}
	pub, err := e.cl.NodeClient(from)
	if err != nil {
		e.t.Fatal(err)
	}
	defer pub.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, ch := range heard {
		for done := false; !done; {
			pub.Do(ctx, pub.B().Publish().Channel(channel).Message("probe").Build())
			select {
			case <-ch:
				done = true
			case <-tick.C:
			case <-ctx.Done():
				e.t.Fatalf("a PUBLISH on node %d did not reach every other primary within 60s", from)
			}
		}
	}
}

// create creates a solo execution on partition p.
func (e *clusterEnv) create(p model.Partition, ns string, delayUntil int64) model.ExecutionID {
	e.t.Helper()
	eid := model.NewExecutionID(p, model.NewUUID())
	if _, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: ns, LaneID: "default", ExecutionKind: "k", DelayUntil: delayUntil}); err != nil {
		e.t.Fatalf("create on %s: %v", p.Tag(), err)
	}
	return eid
}

func (e *clusterEnv) now() int64 {
	e.t.Helper()
	ms, err := e.c.ServerTime(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return ms
}

func (e *clusterEnv) waitCore(eid model.ExecutionID, field, want string) {
	e.t.Helper()
	valkeytest.Eventually(e.t, 60*time.Second, fmt.Sprintf("%s %s=%s", eid, field, want), func() bool { return e.core(eid, field) == want })
}

// flowOnNode creates a flow whose partition is served by node n.
func (e *clusterEnv) flowOnNode(n int) model.UUID {
	e.t.Helper()
	for {
		id := model.NewUUID()
		if e.nodeOf(model.FlowKeysFor(flowParts.FlowPartition(id), id).Core()) != n {
			continue
		}
		if _, err := e.c.CreateFlow(e.ctx, id, "dag", "ns", 0); err != nil {
			e.t.Fatal(err)
		}
		return id
	}
}

// diamond runs A→{B,C}→D in a flow on node n to the end: each completion
// makes the next level eligible through the dependency dispatcher.
func (e *clusterEnv) diamond(n int) {
	e.t.Helper()
	flow := e.flowOnNode(n)
	m := e.members(flow, 4)
	a, b, c, d := m[0], m[1], m[2], m[3]
	e.edges(flow, [2]model.ExecutionID{a, b}, [2]model.ExecutionID{a, c}, [2]model.ExecutionID{b, d}, [2]model.ExecutionID{c, d})
	e.complete(a)
	e.await(fmt.Sprintf("node %d: B and C eligible", n), func() bool { return e.eligible(b) && e.eligible(c) })
	if e.eligible(d) {
		e.t.Fatalf("node %d: D eligible after A only", n)
	}
	e.complete(b)
	e.complete(c)
	e.await(fmt.Sprintf("node %d: D eligible", n), func() bool { return e.eligible(d) })
	e.complete(d)
}

// TestClusterFullPluginSet runs the full plugin set on a 3-primary cluster
// and checks scanners, timers and the flow engine act on partitions of
// every primary, before and after a primary is killed and restarted empty.
// Subtests run in order on one host (loading 18 modules is the expensive
// part).
func TestClusterFullPluginSet(t *testing.T) {
	e := setupClusterEnv(t)
	byNode := e.partitionsByNode()

	t.Run("TimersSubscribeOnEveryPrimary", func(t *testing.T) {
		for i := range e.cl.Nodes {
			valkeytest.Eventually(t, 30*time.Second, fmt.Sprintf("due-timer subscription on node %d", i), func() bool { return e.wakeSubscribed(i) })
		}
	})

	t.Run("DelayedPromotionOnEveryPrimary", func(t *testing.T) {
		due := e.now() + 300
		var ids []model.ExecutionID
		for _, ps := range byNode {
			for _, p := range ps {
				ids = append(ids, e.create(p, "cl-dp", due))
			}
		}
		for _, id := range ids {
			e.waitCore(id, "eligibility_state", "eligible_now")
		}
	})

	t.Run("LeaseExpiryOnEveryPrimary", func(t *testing.T) {
		var ids []model.ExecutionID
		for _, ps := range byNode {
			id := e.create(ps[0], "cl-le", 0)
			if err := e.c.IssueClaimGrant(e.ctx, &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", Lane: "default", GrantTTLMs: 5000}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.ClaimExecution(e.ctx, &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", LaneID: "default", LeaseTTLMs: 200}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			e.waitCore(id, "ownership_state", "lease_expired_reclaimable")
		}
	})

	t.Run("DiamondFlowOnEveryPrimary", func(t *testing.T) {
		for n := range e.cl.Nodes {
			e.diamond(n)
		}
	})

	t.Run("RestartedPrimary", func(t *testing.T) {
		const victim = 1
		if err := e.cl.RestartNode(e.ctx, victim); err != nil {
			t.Fatal(err)
		}
		// The node is back empty: no library, no notify flags. The host's
		// wake subscription comes back on it, and work on its partitions
		// goes on (the first FCALL there reloads the libraries).
		valkeytest.Eventually(t, 60*time.Second, "due-timer subscription back on the restarted node", func() bool { return e.wakeSubscribed(victim) })
		// The completion listener is subscribed on some primary, and the
		// restarted node's PUBLISHes reach every other primary again (its
		// cluster-bus links come back after cluster_state is ok; a
		// completion published before is left to the reconciler, which
		// this test keeps out of the way).
		valkeytest.Eventually(t, 60*time.Second, "completion listener subscribed", e.listenerSubscribed)
		e.waitPublishReaches(victim)
		var id model.ExecutionID
		valkeytest.Eventually(t, 60*time.Second, "create on the restarted node", func() bool {
			eid := model.NewExecutionID(byNode[victim][0], model.NewUUID())
			_, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: "cl-rs", LaneID: "default", ExecutionKind: "k", DelayUntil: e.now() + 300})
			id = eid
			return err == nil
		})
		e.waitCore(id, "eligibility_state", "eligible_now")
		e.diamond(victim)
	})
}
