package valkey_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestPluginStoreFCallBatch: PluginStore.FCallBatch decodes each reply
// straight into the abi.CallResult the fcall host function reported
// through CallResult(Client.FCallBatch): an OK reply, a library error, a
// malformed reply, each in its call's place.
func TestPluginStoreFCallBatch(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := model.KeysFor(model.NewExecutionID(model.Partition{Family: model.FamilyFlow}, model.NewUUID()))
	calls := []abi.Call{
		{Function: "ff_read_summary", Keys: []string{k.StreamSummary(0)}, Item: "ignored"},
		{Function: "ff_update_progress", Keys: []string{k.Core()}, Args: []string{"x", "y", "1", "", ""}},
		{Function: "ff_version"},
	}
	got := valkey.PluginStore{C: c}.FCallBatch(ctx, calls)
	vcalls := make([]valkey.Call, len(calls))
	for i, call := range calls {
		vcalls[i] = valkey.Call{Function: call.Function, Keys: call.Keys, Args: call.Args}
	}
	old := c.FCallBatch(ctx, vcalls)
	if len(got) != len(calls) || len(old) != len(calls) {
		t.Fatalf("%d and %d results for %d calls", len(got), len(old), len(calls))
	}
	for i := range calls {
		if want := valkey.CallResult(old[i]); got[i].Result != want.Result || got[i].Status != want.Status || !slices.Equal(got[i].Fields, want.Fields) {
			t.Errorf("call %d (%s): %+v, want %+v", i, calls[i].Function, got[i], want)
		}
	}
	if got[0].Result != abi.StatusOK || !slices.Equal(got[0].Fields, []string{"", "0", "", "0", "0"}) {
		t.Errorf("ff_read_summary of an absent summary: %+v", got[0])
	}
	if got[1].Result != abi.StatusLuaError || got[1].Status != string(valkey.CodeExecutionNotFound) {
		t.Errorf("ff_update_progress of an absent execution: %+v", got[1])
	}
	if got[2].Result != abi.StatusError {
		t.Errorf("ff_version (not of the {1, ...} convention): %+v", got[2])
	}
	if none := (valkey.PluginStore{C: c}).FCallBatch(ctx, nil); len(none) != 0 {
		t.Errorf("empty batch: %d results", len(none))
	}
}

// benchCalls is a batch of 10 ff_read_summary calls (an OK reply each).
func benchCalls(b *testing.B) (*valkey.Client, []abi.Call) {
	c := valkeytest.Client(b)
	calls := make([]abi.Call, 10)
	for i := range calls {
		k := model.KeysFor(model.NewExecutionID(model.Partition{Family: model.FamilyFlow}, model.NewUUID()))
		calls[i] = abi.Call{Function: "ff_read_summary", Keys: []string{k.StreamSummary(0)}}
	}
	return c, calls
}

// BenchmarkPluginStoreFCallBatch is the fcall host function's backend
// path: abi.Calls in, abi.CallResults out (PluginStore).
func BenchmarkPluginStoreFCallBatch(b *testing.B) {
	c, calls := benchCalls(b)
	s, ctx := valkey.PluginStore{C: c}, context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r := s.FCallBatch(ctx, calls); r[0].Result != abi.StatusOK {
			b.Fatal(r[0])
		}
	}
}

// BenchmarkFCallBatchViaCallResult is the same batch the way the host
// ran it before PluginStore: copied into valkey.Calls, FCallBatch, and
// each Result converted by CallResult into a response slice.
func BenchmarkFCallBatchViaCallResult(b *testing.B) {
	c, calls := benchCalls(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		vc := make([]valkey.Call, len(calls))
		for i, call := range calls {
			vc[i] = valkey.Call{Function: call.Function, Keys: call.Keys, Args: call.Args}
		}
		out := make([]abi.CallResult, len(calls))
		for i, r := range c.FCallBatch(ctx, vc) {
			out[i] = valkey.CallResult(r)
		}
		if out[0].Result != abi.StatusOK {
			b.Fatal(out[0])
		}
	}
}
