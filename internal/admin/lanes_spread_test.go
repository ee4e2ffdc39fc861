package admin_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestLanesShowSpread: on the 3-primary cluster, the console's lane counts
// (fabric lanes) name each lane's solo partitioner, count the partitions
// holding its executions and its executions per node: a spread lane on
// all three primaries, a default lane on its one partition and node.
func TestLanesShowSpread(t *testing.T) {
	t.Parallel()
	valkeytest.SharedCluster(t)
	vc := valkeytest.ClusterClient(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	suffix := model.NewUUID().String()[:8]
	spread, plain := "lsp-"+suffix, "lpl-"+suffix
	if err := c.SetLaneSpread(ctx, spread, model.LaneSpread{Spread: true}); err != nil {
		t.Fatal(err)
	}
	const n = 60
	for _, lane := range []string{spread, plain} {
		specs := make([]sdk.ExecutionSpec, n)
		for i := range specs {
			specs[i] = sdk.ExecutionSpec{Lane: lane}
		}
		if _, err := c.EnqueueMany(ctx, specs...); err != nil {
			t.Fatal(err)
		}
	}
	lanes, err := admin.NewConsole(valkey.NewDriver(vc)).Lanes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]admin.LaneCounts{}
	for _, l := range lanes {
		got[l.Lane] = l
	}
	sum := func(m map[string]int64) (s int64) {
		for _, v := range m {
			s += v
		}
		return s
	}
	s, p := got[spread], got[plain]
	if s.Partitioner != "spread" || s.SpreadPartitions != int(vc.Partitions().Flow) || s.Total != n ||
		len(s.Nodes) != valkeytest.ClusterPrimaries || sum(s.Nodes) != n || s.Partitions < 2 {
		t.Fatalf("spread lane: %+v", s)
	}
	if p.Partitioner != "crc16" || p.SpreadPartitions != 0 || p.Total != n || p.Partitions != 1 ||
		len(p.Nodes) != 1 || sum(p.Nodes) != n {
		t.Fatalf("default lane: %+v", p)
	}
	t.Logf("spread: %d partitions, per node %v; default: per node %v", s.Partitions, s.Nodes, p.Nodes)
}
