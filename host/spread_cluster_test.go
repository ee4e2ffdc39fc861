package host_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestSpreadLaneScannersUnchanged: the stock delayed promoter, unchanged,
// promotes a spread lane's delayed executions on every primary of the
// 3-primary cluster (it scans every partition of every registered lane, and
// a spread execution is an ordinary one on another partition), and a worker
// that does not promote anything itself claims each of them exactly once.
func TestSpreadLaneScannersUnchanged(t *testing.T) {
	t.Parallel()
	cl := valkeytest.SharedCluster(t)
	ctx := valkeytest.Context(t, 4*time.Minute)
	c := flowClusterClient(t, ctx, cl)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	lane := "hspread-" + model.NewUUID().String()[:8]
	if err := client.SetLaneSpread(ctx, lane, model.LaneSpread{Spread: true}); err != nil {
		t.Fatal(err)
	}
	const n = 24
	ids := map[model.ExecutionID]bool{}
	nodes := map[int]bool{}
	for range n {
		id, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: lane, Delay: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
		node, err := cl.NodeOf(ctx, model.KeysFor(id).Core())
		if err != nil {
			t.Fatal(err)
		}
		nodes[node] = true
	}
	if len(nodes) != valkeytest.ClusterPrimaries {
		t.Fatalf("%d delayed executions of a spread lane on %d primaries, want %d", n, len(nodes), valkeytest.ClusterPrimaries)
	}
	dir := t.TempDir()
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(dir, "delayed_promoter.wasm"))
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir, Backend: c,
		Logger: slog.New(slog.DiscardHandler), Partitions: flowParts,
		Plugins: map[string]host.PluginConfig{"delayed_promoter": {Interval: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	w, err := sdk.Connect(ctx, c, sdk.WorkerConfig{WorkerID: "hspread", Lanes: []string{lane}, LeaseTTL: time.Minute,
		Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	claimed := map[model.ExecutionID]int{}
	valkeytest.Eventually(t, 2*time.Minute, "every delayed execution promoted by the scanner and claimed", func() bool {
		l, err := w.ClaimNext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l != nil {
			claimed[l.ID]++
			if err := l.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		return len(claimed) == n
	})
	for id, k := range claimed {
		if !ids[id] || k != 1 {
			t.Fatalf("%s claimed %d times (ours: %v)", id, k, ids[id])
		}
	}
}
