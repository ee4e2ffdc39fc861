package valkey_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestLibraryFlushMidWorkload runs create → grant → claim → complete loops
// on several goroutines while the library is flushed from the server twice;
// every call must succeed, the wrappers reloading the library on demand.
func TestLibraryFlushMidWorkload(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 60*time.Second)
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{}); err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 4, 60
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				if err := oneJob(ctx, c, "reload"); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}(w)
	}
	flush := func() {
		if err := c.Raw().Do(ctx, c.Raw().B().FunctionFlush().Build()).Error(); err != nil {
			t.Errorf("FUNCTION FLUSH: %v", err)
		}
	}
	valkeytest.Eventually(t, 30*time.Second, "workload reaches 50 jobs", func() bool { return done.Load() >= 50 })
	flush()
	valkeytest.Eventually(t, 30*time.Second, "workload reaches 150 jobs", func() bool { return done.Load() >= 150 })
	flush()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call failed across the flush: %v", err)
	}
	if got := done.Load(); got != workers*perWorker {
		t.Fatalf("completed %d jobs, want %d", got, workers*perWorker)
	}
}

func oneJob(ctx context.Context, c *valkey.Client, lane string) error {
	return jobOn(ctx, c, c.Partitions().NewSoloExecutionID(lane), lane)
}

// jobOn runs create → grant → claim → complete for execution id.
func jobOn(ctx context.Context, c *valkey.Client, id model.ExecutionID, lane string) error {
	if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "t", LaneID: lane, ExecutionKind: "k"}); err != nil {
		return err
	}
	if err := c.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", Lane: lane, GrantTTLMs: 5000}); err != nil {
		return err
	}
	lease, err := c.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", LaneID: lane, LeaseTTLMs: 10000})
	if err != nil {
		return err
	}
	return c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: id, Fence: lease.Fence()})
}
