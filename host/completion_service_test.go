package host

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestCompletionServiceStartStop: the completion dispatch service hands
// every valid completion published on ff:dag:completions to its driver
// (malformed ones are dropped), resubscribes and resyncs after its
// connection is killed, and Stop ends the listener and the driver and
// waits for a resync sweep still running.
func TestCompletionServiceStartStop(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t) // its own server: completions are server-wide, and the test kills pub/sub connections
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, time.Minute)

	cfg := CompletionConfig{Enabled: true, Signals: &CompletionSignals{}}.withDefaults()
	cfg.Signals.Init()
	got := make(chan abi.Completion, 16)
	driverDone := make(chan struct{})
	resynced := make(chan struct{}, 4)
	var resyncEnded atomic.Bool
	s := &completionService{cfg: cfg, backend: c, logger: valkeytest.Logger(), clock: systemClock{},
		drive: func(ctx context.Context, queue <-chan queuedCompletion) {
			defer close(driverDone)
			for {
				select {
				case <-ctx.Done():
					return
				case q := <-queue:
					if q.Received.IsZero() {
						t.Errorf("%+v queued without the time it was received", q.Completion)
					}
					got <- q.Completion
				}
			}
		},
		resync: func(ctx context.Context) {
			resynced <- struct{}{}
			// A sweep cut by Stop still finishes its round trips, which
			// end after the driver has returned.
			<-ctx.Done()
			<-driverDone
			r := c.Raw()
			for range 20 {
				_ = r.Do(context.Background(), r.B().Ping().Build()).Error()
			}
			resyncEnded.Store(true)
		},
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	<-s.Started()
	if n := cfg.Signals.Subscribed.WaitOrTimeout(t); n != 1 {
		t.Fatalf("subscription %d, want the first", n)
	}

	publish := func(msg string) {
		r := c.Raw()
		if err := r.Do(ctx, r.B().Publish().Channel(abi.CompletionsChannel).Message(msg).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	valid := func() abi.Completion {
		return abi.Completion{ExecutionID: string(model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 1}, model.NewUUID())),
			FlowID: model.NewUUID().String(), Outcome: "success"}
	}
	send := func(cm abi.Completion) {
		b, err := json.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		publish(string(b))
	}
	receive := func(want abi.Completion) {
		select {
		case cm := <-got:
			if cm != want {
				t.Fatalf("driver got %+v, want %+v", cm, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("driver never got %+v", want)
		}
	}

	first := valid()
	publish("not json")
	send(abi.Completion{ExecutionID: "bad", FlowID: first.FlowID})
	send(first)
	receive(first) // the malformed two were dropped before it

	r := c.Raw()
	if err := r.Do(ctx, r.B().ClientKill().TypePubsub().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n := cfg.Signals.Subscribed.WaitOrTimeout(t); n != 2 {
		t.Fatalf("subscription %d, want the second", n)
	}
	select {
	case <-resynced:
	case <-time.After(30 * time.Second):
		t.Fatal("no resync after resubscribing")
	}
	second := valid()
	send(second)
	receive(second)

	s.Stop()
	s.Stop()
	select {
	case <-driverDone:
	default:
		t.Fatal("the driver outlived Stop")
	}
	if !resyncEnded.Load() {
		t.Fatal("Stop returned while a resync sweep was still running")
	}
}
