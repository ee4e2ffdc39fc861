package host_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// readCounter is a NativeHost that counts read batches and keeps every
// per-command error they answered.
type readCounter struct {
	*host.NativeHost
	batches int
	errs    []string
}

func (r *readCounter) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	r.batches++
	rs, err := r.NativeHost.ReadBatch(ops)
	if err != nil {
		r.errs = append(r.errs, err.Error())
	}
	for _, x := range rs {
		if x.Err != "" {
			r.errs = append(r.errs, x.Err)
		}
	}
	return rs, err
}

// On a Valkey Cluster the cascade resolves a level whether or not the
// server takes its one-read SORT_RO (Valkey 8.0 accepts a GET pattern on
// the key's own slot; the tests' 7.0 denies any): a refusal costs one
// read batch once, and later cascades read in two batches (SORT_RO) or
// three (after a refusal), without errors.
func TestCascadeReadsOnCluster(t *testing.T) {
	t.Parallel()
	cl := valkeytest.SharedCluster(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	c := flowClusterClient(t, ctx, cl)
	parts := c.Partitions()
	flow := model.NewUUID()
	fk := model.FlowKeysFor(parts.FlowPartition(flow), flow)
	up, child := parts.NewFlowExecutionID(flow), parts.NewFlowExecutionID(flow)
	edge := model.NewUUID().String()
	raw := c.Raw()
	for _, cmd := range [][]string{
		{"HSET", model.KeysFor(up).Core(), "terminal_outcome", "success"},
		{"SADD", fk.Outgoing(up), edge},
		{"HSET", fk.Edge(edge), "downstream_execution_id", string(child)},
		{"HSET", model.KeysFor(child).Core(), "lane_id", "default", "current_attempt_index", "0"},
	} {
		if err := raw.Do(ctx, raw.B().Arbitrary(cmd[0]).Keys(cmd[1]).Args(cmd[2:]...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	h := &readCounter{NativeHost: host.NewNativeHost(ctx, c, valkeytest.Logger())}
	var firstBatches int
	for run := range 2 {
		var calls []abi.Call
		h.batches, h.errs = 0, nil
		st := flowlib.Cascade(callRecorder{h, &calls}, parts, up, flow.String(), 1)
		if len(calls) != 1 || calls[0].Args[4] != string(child) || st.Resolved != 1 || st.Errors != 0 {
			t.Fatalf("run %d: resolves %+v, stats %+v", run, calls, st)
		}
		if run == 0 {
			firstBatches = h.batches
			continue
		}
		if len(h.errs) != 0 || h.batches != 2 && h.batches != 3 || firstBatches == 4 && h.batches != 3 {
			t.Fatalf("read batches %d then %d, errors of the second %v", firstBatches, h.batches, h.errs)
		}
	}
}

// callRecorder keeps the FCALLs a pdk.Host is asked for and answers each
// with OK, without sending it.
type callRecorder struct {
	pdk.Host
	calls *[]abi.Call
}

func (r callRecorder) FCall(calls []abi.Call) ([]abi.CallResult, error) {
	*r.calls = append(*r.calls, calls...)
	out := make([]abi.CallResult, len(calls))
	for i := range out {
		out[i] = abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{"satisfied"}}
	}
	return out, nil
}
