package host

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
)

// oneDueStore answers every index read with one due execution of flow
// partition 0 (and every FCALL with OK, as emptyStore does).
type oneDueStore struct {
	emptyStore
	id string
}

func (s oneDueStore) ZRangeByScore(context.Context, abi.ZRangeRequest) (abi.Members, error) {
	return abi.Members{Members: []string{s.id}, Scores: []float64{999_000}}, nil
}

// BenchmarkDelayedPromoterActing is one partition scan of the real
// promoter that finds one due execution and promotes it (clock, index
// read, one FCALL) over an in-memory store: the plugin-side cost of each
// item of a promotion burst (scenario 4 of `make bench`), without Valkey.
// Compare cpu-us/op with BenchmarkDelayedPromoterIdle and
// BenchmarkScanEmpty.
func BenchmarkDelayedPromoterActing(b *testing.B) {
	id := string(model.NewExecutionID(model.Partition{Family: model.FamilyFlow}, model.NewUUID()))
	lc := benchLoader(b, benchCache(b))
	lc.fns = hostfn.Functions(hostfn.Config{Store: oneDueStore{id: id}, Now: func(context.Context) (int64, error) { return 1_000_000, nil }})
	m, err := loadModule(context.Background(), benchFixture(b, "delayed_promoter"), lc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(context.Background()) })
	man := m.Manifest()
	caller := &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: "{fp:0}", Stats: &hostfn.Stats{}, Logger: benchLogger()}
	in := scanInput(50)
	ctx := context.Background()
	cpu := processCPU()
	for b.Loop() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := m.call(cctx, abi.ExportScan, in, caller, nil)
		cancel()
		var res abi.ScanResult
		if err == nil {
			err = res.UnmarshalBinary(out)
		}
		if err != nil {
			b.Fatal(err)
		}
		if res.Acted != 1 {
			b.Fatalf("scan acted on %d, want 1", res.Acted)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
}
