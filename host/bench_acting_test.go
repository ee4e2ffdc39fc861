package host

import (
	"context"
	"fmt"
	"testing"

	"github.com/fabric-host/fabric/abi"
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
	m, caller := benchModuleOn(b, "delayed_promoter", oneDueStore{id: id}, "{fp:0}")
	benchCallChecked(b, m, caller, abi.ExportScan, scanInput(50), func(res abi.ScanResult) error {
		if res.Acted != 1 {
			return fmt.Errorf("scan acted on %d, want 1", res.Acted)
		}
		return nil
	})
}
