package sdk_test

import (
	"context"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// A member added after one parent finished while another still runs must
// never be eligible: FlowFabric resolves edges one at a time, and Flow.Add
// once applied and resolved each edge before staging the next, so the
// finished parent's edge made the child eligible (ZADD lane:eligible)
// until the running parent's edge was applied. A worker claiming in that
// gap ran the child before its other parent finished. The test watches
// the child lane's eligible index through keyspace notifications on a
// private server: no ZADD may happen while Add runs, and one happens once
// the running parent completes.
func TestFlowAddHoldsChildUntilEveryEdgeApplied(t *testing.T) {
	t.Parallel()
	s := valkeytest.NewServer(t)
	vc := valkeytest.Dial(t, s.URL(), 0)
	ctx := valkeytest.Context(t, 60*time.Second)
	if _, err := vc.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	raw := vc.Raw()
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "Kz").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"up"}, ResolveDependencies: true,
		Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	f, err := c.CreateFlow(ctx, "diamond")
	if err != nil {
		t.Fatal(err)
	}
	add := func(lane string, after ...model.ExecutionID) model.ExecutionID {
		t.Helper()
		id, err := f.Add(ctx, sdk.ExecutionSpec{Lane: lane}, after...)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// run claims the only eligible member of lane "up" and completes it.
	run := func(want model.ExecutionID) {
		t.Helper()
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed "+string(want), func() bool {
			var err error
			l, err = w.ClaimNext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return l != nil
		})
		if l.ID != want {
			t.Fatalf("claimed %s, want %s", l.ID, want)
		}
		if err := l.Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	root := add("up")
	run(root)
	left := add("up", root)
	run(left)
	right := add("up", root) // eligible, left unclaimed: it "runs"

	// Watch the join lane's eligible index of the flow's partition.
	channel := "__keyspace@0__:" + model.KeysOn(left.Partition()).LaneEligible("join")
	var mu sync.Mutex
	var events []string
	sub := valkeytest.Dial(t, s.URL(), 0)
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	go func() {
		_ = sub.Raw().Receive(subCtx, sub.Raw().B().Subscribe().Channel(channel).Build(), func(m vk.PubSubMessage) {
			mu.Lock()
			events = append(events, m.Message)
			mu.Unlock()
		})
	}()
	// seen publishes marker on the channel and waits for it: the server
	// delivers in order, so every earlier event has arrived too.
	seen := func(marker string) []string {
		t.Helper()
		var out []string
		valkeytest.Eventually(t, 30*time.Second, "marker "+marker, func() bool {
			if err := raw.Do(ctx, raw.B().Publish().Channel(channel).Message(marker).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i, e := range events {
				if e == marker {
					out = append([]string(nil), events[:i]...)
					return true
				}
			}
			return false
		})
		return out
	}
	seen("subscribed")

	join := add("join", left, right)
	for _, e := range seen("added") {
		if e == "zadd" {
			t.Fatalf("join was made eligible while Flow.Add applied its edges (events %v)", events)
		}
	}
	st, err := c.State(ctx, join)
	if err != nil {
		t.Fatal(err)
	}
	if st.EligibilityState != model.EligibleBlockedByDeps {
		t.Fatalf("join after Add: %s (%s)", st.EligibilityState, st.Fields["blocking_detail"])
	}

	run(right)
	got := seen("right done")
	found := false
	for _, e := range got {
		found = found || e == "zadd"
	}
	if !found {
		t.Fatalf("join not made eligible after both parents completed (events %v)", got)
	}
	if st, err := c.State(ctx, join); err != nil || st.EligibilityState != model.EligibleNow {
		t.Fatalf("join after right: %+v %v", st, err)
	}
}
