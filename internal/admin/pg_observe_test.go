package admin_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/sdk"
)

// TestPGCensus reads a database's census as `fabric run --backend
// postgres` does, from its first sample: an empty database has a census
// at the server's clock (not at the epoch); then executions counted
// exactly by state and lane, a registered lane without executions listed
// with zero counts, no lag while no delayed execution is due, and the
// lag of one that is due with no promoter running. The console's lane
// counts agree.
func TestPGCensus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres cluster")
	}
	t.Parallel()
	pc := pgtest.Client(t, postgres.ClientConfig{URL: pgtest.NewDatabase(t, true)})
	ctx := pgtest.Context(t, time.Minute)
	take := admin.PGCensus(pc)

	s := admin.NewSampler(admin.SamplerConfig{Take: take})
	s.Sample(ctx)
	cen, _, err := s.Latest()
	if err != nil || cen == nil {
		t.Fatalf("first sample of an empty database: %v", err)
	}
	if d := time.Since(cen.At); d < -time.Minute || d > time.Minute || len(cen.Lanes) != 0 || cen.Executions["eligible"] != 0 {
		t.Fatalf("empty database: census at %s, lanes %v, executions %v", cen.At, cen.Lanes, cen.Executions)
	}

	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []sdk.ExecutionSpec{
		{Lane: "census-a", Kind: "k"}, {Lane: "census-a", Kind: "k"}, {Lane: "census-b", Kind: "k"},
		{Lane: "census-b", Kind: "k", Delay: time.Hour},
	} {
		if _, err := client.CreateExecution(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pc.Pool().Exec(ctx, `INSERT INTO ff_lane_registry (lane_id, registered_at_ms, registered_by) VALUES ('census-empty', 0, 'test')`); err != nil {
		t.Fatal(err)
	}
	cen, err = take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cen.Lanes, []string{"census-a", "census-b", "census-empty"}) || cen.Executions["eligible"] != 3 ||
		cen.Executions["delayed"] != 1 || cen.Executions["terminal"] != 0 || cen.LagMs["pg_delayed_promoter"] != 0 {
		t.Fatalf("census: lanes %v, executions %v, lag %v", cen.Lanes, cen.Executions, cen.LagMs)
	}
	lanes, err := admin.NewConsole(postgres.NewDriver(pc)).Lanes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != 3 || lanes[0].Counts["eligible"] != 2 || lanes[0].Total != 2 || lanes[1].Counts["delayed"] != 1 ||
		lanes[1].Total != 2 || lanes[2].Lane != "census-empty" || lanes[2].Total != 0 || lanes[2].Counts["eligible"] != 0 {
		t.Fatalf("console lanes: %+v", lanes)
	}

	// A delay that ends with no promoter running: the lag grows from its
	// end, measured by the server's clock.
	if _, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "census-b", Kind: "k", Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if cen, err = take(ctx); err != nil {
			t.Fatal(err)
		}
		if lag := cen.LagMs["pg_delayed_promoter"]; lag > 0 {
			if lag > 30_000 || cen.Executions["delayed"] != 2 {
				t.Fatalf("lag %d ms, executions %v", lag, cen.Executions)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lag reported for a due delayed execution: %v", cen.LagMs)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
