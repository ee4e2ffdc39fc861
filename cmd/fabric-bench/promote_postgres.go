package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// pgPromoter is the scanner that promotes delayed executions on Postgres.
const pgPromoter = "pg_delayed_promoter"

// pgPromoteJobsMax caps scenario 4's Postgres run: creating executions on
// Postgres is a transaction each, so a few thousand make the burst.
const pgPromoteJobsMax = 4000

// pgPromotedDDL records, by a trigger of the bench's own on its fresh
// database, when each delayed execution became eligible (the database's
// clock_timestamp at the promoting UPDATE, in µs).
const pgPromotedDDL = `
CREATE TABLE bench_promoted (execution_id uuid PRIMARY KEY, at_us bigint NOT NULL);
CREATE FUNCTION bench_promoted_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO bench_promoted VALUES (NEW.execution_id, (extract(epoch FROM clock_timestamp()) * 1e6)::bigint)
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER bench_promoted_trg AFTER UPDATE ON ff_exec_core FOR EACH ROW
  WHEN (OLD.eligibility_state = 'not_eligible_until_time' AND NEW.eligibility_state = 'eligible_now')
  EXECUTE FUNCTION bench_promoted_fn();`

// promotionPostgres measures due→eligible lateness on Postgres: delayed
// executions spread over the flow partitions, due evenly over
// PromoteSpread, promoted by a host running pg_delayed_promoter as
// `fabric run --backend postgres` runs it (its stock interval), on a
// fresh database of the throwaway cluster. It returns each execution's
// lateness in ms, how many were created, and a note.
func promotionPostgres(ctx context.Context, e *benchEnv) ([]float64, int, string, error) {
	n, spread := min(e.size.PromoteJobs, pgPromoteJobsMax), e.size.PromoteSpread
	url, err := e.migratedPostgresURL(ctx)
	if err != nil {
		return nil, 0, "", err
	}
	pc, err := postgres.Connect(ctx, postgres.ClientConfig{URL: url, MaxConns: 16, Logger: e.log})
	if err != nil {
		return nil, 0, "", err
	}
	defer pc.Close()
	if _, err := pc.Pool().Exec(ctx, pgPromotedDDL); err != nil {
		return nil, 0, "", fmt.Errorf("bench trigger: %w", err)
	}
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: e.log})
	if err != nil {
		return nil, 0, "", err
	}
	dir, err := e.stockPluginDir(ctx, pgPromoter)
	if err != nil {
		return nil, 0, "", err
	}
	defer os.RemoveAll(dir)
	opts := hostOpts{pg: pc, records: 1 << 16}
	h, err := e.startHost(ctx, dir, nil, opts)
	if err != nil {
		return nil, 0, "", err
	}
	defer stopHost(h)

	due, base, note, err := createDelayedBurst(ctx, cl, n, int(pc.Partitions().Flow), 100, time.Second, spread,
		func(id model.ExecutionID) string { return id.UUIDString() })
	if err != nil {
		return nil, 0, "", err
	}
	created := time.Now()
	var got int
	waitFor(ctx, time.Until(base)+spread+30*time.Second, 50*time.Millisecond, func() bool {
		return pc.Pool().QueryRow(ctx, "SELECT count(*) FROM bench_promoted").Scan(&got) == nil && got >= n
	})
	if got < n {
		note += "; capped"
	}
	recs := h.Records(pgPromoter)
	note += pgPassNote(recs, base, time.Now(), "from the first due time on") + pgPassNote(recs, created, base, "between the last create and the first due time (nothing due)")
	rows, err := pc.Pool().Query(ctx, "SELECT execution_id::text, at_us FROM bench_promoted")
	if err != nil {
		return nil, 0, "", err
	}
	defer rows.Close()
	var lat []float64
	for rows.Next() {
		var id string
		var at int64
		if err := rows.Scan(&id, &at); err != nil {
			return nil, 0, "", err
		}
		if d, ok := due[id]; ok {
			lat = append(lat, float64(at-d.UnixMicro())/1000)
		}
	}
	return lat, n, note, rows.Err()
}

// pgPromotionRows adds scenario 4's Postgres rows (promotionPostgres).
func pgPromotionRows(ctx context.Context, e *benchEnv, sc *Scenario) error {
	lat, created, note, err := promotionPostgres(ctx, e)
	if err != nil {
		return err
	}
	p50, p99, mx := percentiles(lat)
	const name = "Postgres, pg_delayed_promoter"
	sc.Rows = append(sc.Rows,
		Row{Measure: name + ": due → eligible, p50", Fabric: p50, Versus: "(no peer)", Peer: nan(), Unit: "ms", Goal: "p99 < 1 s"},
		Row{Measure: name + ": due → eligible, p99", Fabric: p99, Versus: "(no peer)", Peer: nan(), Unit: "ms", Goal: "p99 < 1 s",
			Note: fmt.Sprintf("max %s, %d of %d observed%s", fmtNum(mx, "ms"), len(lat), created, note)})
	sc.Notes = append(sc.Notes, fmt.Sprintf("Postgres: %d delayed executions (at most %d: a create is a transaction) over the 256 partitions, due evenly over the same spread, on a fresh database of the throwaway cluster (fsync and synchronous_commit off), promoted by a host running pg_delayed_promoter as `fabric run --backend postgres` runs it. Eligible is the database's clock_timestamp() at the promoting UPDATE, recorded by a trigger of the bench's own (AFTER UPDATE … WHEN eligibility_state turns eligible_now) into a side table; no workers run.", created, pgPromoteJobsMax))
	return nil
}

// pgPassNote summarises the promoter's full passes (cycles) that started
// in [from, to), from the host's records: their count and p50/max
// duration (first call's start to last call's end).
func pgPassNote(recs []host.CycleRecord, from, to time.Time, what string) string {
	type span struct{ start, end time.Time }
	passes := map[uint64]*span{}
	for _, r := range recs {
		sp, ok := passes[r.Cycle]
		if !ok {
			sp = &span{r.Start, r.End}
			passes[r.Cycle] = sp
		}
		if r.Start.Before(sp.start) {
			sp.start = r.Start
		}
		if r.End.After(sp.end) {
			sp.end = r.End
		}
	}
	var ms []float64
	for _, sp := range passes {
		if !sp.start.Before(from) && sp.start.Before(to) {
			ms = append(ms, float64(sp.end.Sub(sp.start).Microseconds())/1000)
		}
	}
	if len(ms) == 0 {
		return ""
	}
	p50, _, mx := percentiles(ms)
	return fmt.Sprintf("; %d full passes over the 256 partitions %s, p50 %s, max %s each", len(ms), what, fmtNum(p50, "ms"), fmtNum(mx, "ms"))
}
