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
