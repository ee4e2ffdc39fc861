package backendtest

import (
	"context"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// testWatchTerminal: Driver.WatchTerminal wakes after every kind of
// terminal transition of an execution outside a flow — completed, failed
// for good, cancelled while waiting — naming its partition or -1, and
// not for a claim.
func testWatchTerminal(e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	wakes, up, ended := make(chan int, 64), make(chan struct{}), make(chan error, 1)
	go func() {
		ended <- e.d.WatchTerminal(ctx, func(p int) {
			select {
			case wakes <- p:
			default:
			}
		}, func() { close(up) })
	}()
	defer func() {
		cancel()
		if err := <-ended; err != nil {
			e.t.Errorf("WatchTerminal after its context ended: %v", err)
		}
	}()
	select {
	case <-up:
	case err := <-ended:
		e.t.Fatalf("WatchTerminal ended before it was up: %v", err)
	case <-time.After(time.Minute):
		e.t.Fatal("WatchTerminal not up after a minute")
	}
	expectWake := func(what string, id model.ExecutionID) {
		e.t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case p := <-wakes:
				if p == -1 || p == int(id.Partition().Index) {
					return
				}
			case <-deadline:
				e.t.Fatalf("no wake-up for %s %s", what, id)
			}
		}
	}
	drain := func() {
		for len(wakes) > 0 {
			<-wakes
		}
	}

	id := e.create(e.spec())
	c := e.mustClaim()
	e.complete(c, nil)
	expectWake("the completion of", id)

	drain()
	id = e.create(e.spec())
	c = e.mustClaim()
	if _, err := e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		FailureReason: "boom", FailureCategory: "test"}); err != nil {
		e.t.Fatal(err)
	}
	expectWake("the failure of", id)

	drain()
	id = e.create(e.spec())
	if err := e.d.CancelExecution(e.ctx, &backend.CancelExecutionParams{ExecutionID: id, Reason: "bt"}); err != nil {
		e.t.Fatal(err)
	}
	expectWake("the cancellation of", id)
}
