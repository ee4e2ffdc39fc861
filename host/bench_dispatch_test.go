package host

import (
	"context"
	"fmt"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// oneEdgeStore answers the dependency dispatcher's reads for a member
// with one outgoing edge to child: the member's terminal_outcome, its out
// set (with the edge's downstream through SORT_RO, or alone), the edge's
// downstream, the child's lane and attempt (and every FCALL with OK, as
// emptyStore does).
type oneEdgeStore struct {
	emptyStore
	edge, child string
}

func (s oneEdgeStore) ReadBatch(_ context.Context, ops []abi.ReadOp) []abi.ReadResult {
	out := make([]abi.ReadResult, len(ops))
	for i, o := range ops {
		switch {
		case o.Cmd == "SORT_RO": // the out set's edges with their downstreams
			out[i] = abi.ReadResult{Values: []string{s.edge, s.child}, Present: []bool{true, true}}
		case o.Cmd == "SMEMBERS":
			out[i] = abi.ReadResult{Values: []string{s.edge}, Present: []bool{true}}
		case len(o.Args) == 1 && o.Args[0] == "downstream_execution_id":
			out[i] = abi.ReadResult{Values: []string{s.child}, Present: []bool{true}}
		case len(o.Args) == 2:
			out[i] = abi.ReadResult{Values: []string{"default", "0"}, Present: []bool{true, true}}
		default:
			out[i] = abi.ReadResult{Values: []string{"success"}, Present: []bool{true}}
		}
	}
	return out
}

// BenchmarkDependencyDispatch is the dependency dispatcher handling one
// completion of a linear flow (clock, two dependent read batches, one
// ff_resolve_dependency) over an in-memory store: the plugin-side cost of
// each level of scenario 3 of `make bench` (DAG latency), without Valkey.
// Compare cpu-us/op with BenchmarkScanEmpty.
func BenchmarkDependencyDispatch(b *testing.B) {
	parts := model.DefaultPartitionConfig()
	flow := model.NewUUID()
	member := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 3}, model.NewUUID())
	child := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 7}, model.NewUUID())
	store := oneEdgeStore{edge: model.NewUUID().String(), child: string(child)}
	m, caller := benchModuleOn(b, "dependency", store, "")
	req := abi.DispatchRequest{Batch: 1, DeadlineMs: 5000, Partitions: parts,
		Completions: []abi.Completion{{ExecutionID: string(member), FlowID: flow.String(), Outcome: "success"}}}
	in, _ := req.MarshalBinary()
	benchCallChecked(b, m, caller, abi.ExportDispatch, in, func(res abi.ScanResult) error {
		if res.Acted != 1 || res.Errors != 0 {
			return fmt.Errorf("dispatch acted on %d with %d errors, want 1 and 0", res.Acted, res.Errors)
		}
		return nil
	})
}
