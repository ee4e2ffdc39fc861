package census_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/census"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// A lease past its expiry that the lease-expiry scanner has not marked is
// its lag; once marked it waits for a worker to reclaim it, which is
// counted apart with its cause and no longer as lag.
func TestLeaseLagSplitsAwaitingReclaim(t *testing.T) {
	t.Parallel()
	vc := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "l"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, crash := context.WithCancel(ctx)
	w, err := sdk.Connect(wctx, vc, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, LeaseTTL: 100 * time.Millisecond,
		Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	var l *sdk.Lease
	valkeytest.Eventually(t, 10*time.Second, "claimed", func() bool {
		l, err = w.ClaimNext(wctx)
		return err == nil && l != nil
	})
	crash()
	<-l.Context().Done()

	valkeytest.Eventually(t, 10*time.Second, "the expired lease is lag", func() bool {
		cen, err := census.Take(ctx, vc)
		if err != nil {
			t.Fatal(err)
		}
		_, waiting := cen.Waiting["lease_expiry"]
		return cen.LagMs["lease_expiry"] > 0 && !waiting
	})
	if r, err := vc.MarkLeaseExpiredIfDue(ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: id}); err != nil || r.Reason != "marked_expired" {
		t.Fatalf("mark: %+v %v", r, err)
	}
	cen, err := census.Take(ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	wt, ok := cen.Waiting["lease_expiry"]
	if lag := cen.LagMs["lease_expiry"]; lag != 0 || !ok || wt.Count != 1 || wt.Cause != census.CauseAwaitingReclaim || wt.OldestMs <= 0 {
		t.Fatalf("after marking: lag %d, waiting %+v (%v)", lag, wt, ok)
	}
	if !strings.Contains(wt.String(), "1 awaiting reclaim") {
		t.Fatalf("waiting reads %q", wt)
	}
	if st, _ := c.State(ctx, id); st.OwnershipState != model.OwnershipLeaseExpiredReclaimable {
		t.Fatalf("ownership %s", st.OwnershipState)
	}
}
