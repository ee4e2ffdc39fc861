package hostfn

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// memTracker is a failure tracker that skips the items in skip and notes
// what fcall records.
type memTracker struct {
	skip           []string
	success, fails []string
}

func (t *memTracker) ShouldSkip(item string) bool { return slices.Contains(t.skip, item) }
func (t *memTracker) RecordSuccess(item string)   { t.success = append(t.success, item) }
func (t *memTracker) RecordFailure(item string)   { t.fails = append(t.fails, item) }

// TestFCallResultsInPlace: the fcall host function sends the calls it does
// not skip, on a real server through valkey.PluginStore, and answers every
// call in its request's place: skipped ones StatusSkipped, sent ones their
// reply, with the tracker told each sent item's outcome. Run with and
// without a skipped call (the batch is then sent as the request holds it).
func TestFCallResultsInPlace(t *testing.T) {
	c := valkeytest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := model.KeysFor(model.NewExecutionID(model.Partition{Family: model.FamilyFlow}, model.NewUUID()))
	calls := []abi.Call{
		{Function: "ff_read_summary", Keys: []string{k.StreamSummary(0)}, Item: "a"},
		{Function: "ff_update_progress", Keys: []string{k.Core()}, Args: []string{"x", "y", "1", "", ""}, Item: "b"},
		{Function: "ff_read_summary", Keys: []string{k.StreamSummary(1)}},
		{Function: "ff_update_progress", Keys: []string{k.Core()}, Args: []string{"x", "y", "1", "", ""}, Item: "d"},
	}
	h := fcallHandler(Config{Store: valkey.PluginStore{C: c}, MaxCalls: 100})
	for _, tc := range []struct {
		name          string
		skip          []string
		want          []abi.CallStatus
		success, fail []string
	}{
		{"NoneSkipped", nil, []abi.CallStatus{abi.StatusOK, abi.StatusLuaError, abi.StatusOK, abi.StatusLuaError}, []string{"a"}, []string{"b", "d"}},
		{"SomeSkipped", []string{"b"}, []abi.CallStatus{abi.StatusOK, abi.StatusSkipped, abi.StatusOK, abi.StatusLuaError}, []string{"a"}, []string{"d"}},
		{"FirstSkipped", []string{"a", "d"}, []abi.CallStatus{abi.StatusSkipped, abi.StatusLuaError, abi.StatusOK, abi.StatusSkipped}, nil, []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &memTracker{skip: tc.skip}
			caller := &Caller{Plugin: "p", Tracker: tr, Stats: &Stats{}, Logger: slog.New(slog.DiscardHandler)}
			out, err := h.run(ctx, caller, &abi.FCallRequest{Calls: calls})
			if err != nil {
				t.Fatal(err)
			}
			var resp abi.FCallResponse
			if err := resp.UnmarshalBinary(out); err != nil {
				t.Fatal(err)
			}
			got := make([]abi.CallStatus, len(resp.Results))
			for i, r := range resp.Results {
				got[i] = r.Result
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("statuses %v, want %v (%+v)", got, tc.want, resp.Results)
			}
			for i, r := range resp.Results {
				if r.Result == abi.StatusLuaError && r.Status != string(valkey.CodeExecutionNotFound) {
					t.Errorf("call %d: %+v, want execution_not_found", i, r)
				}
			}
			if !slices.Equal(tr.success, tc.success) || !slices.Equal(tr.fails, tc.fail) {
				t.Fatalf("tracker told success %v failure %v, want %v %v", tr.success, tr.fails, tc.success, tc.fail)
			}
		})
	}
}
