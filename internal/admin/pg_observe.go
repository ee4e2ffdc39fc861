package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/internal/census"
)

// PGProbe is the Prober of a Postgres deployment: a round trip on the
// pool, then the schema check (postgres.CheckSchema: ErrNotMigrated
// names `fabric migrate`).
func PGProbe(c *postgres.Client) Prober { return pgProbe{c} }

type pgProbe struct{ c *postgres.Client }

func (p pgProbe) Ping(ctx context.Context) error { return p.c.Pool().Ping(ctx) }

func (p pgProbe) Ready(ctx context.Context) error { return postgres.CheckSchema(ctx, p.c.Pool()) }

// PGCensus returns the census reader of a Postgres deployment for
// SamplerConfig.Take: executions by state from ff_exec_core (the states of
// census.States, as the Postgres console's lane counts map them), the
// lanes, and pg_delayed_promoter's lag (the oldest due delayed
// execution), all from one statement (postgres.Driver.LaneCensus: cheap from the first
// sample, exact). Partition leases do not exist on Postgres: no Ownership.
func PGCensus(c *postgres.Client) func(ctx context.Context) (*census.Census, error) {
	d := postgres.NewDriver(c)
	return func(ctx context.Context) (*census.Census, error) {
		lanes, nowMs, earliestDelayed, err := d.LaneCensus(ctx)
		if err != nil {
			return nil, fmt.Errorf("census: %w", err)
		}
		cen := &census.Census{At: time.UnixMilli(nowMs), Lanes: make([]string, 0, len(lanes)),
			Executions: map[string]int64{}, LagMs: map[string]int64{"pg_delayed_promoter": 0}}
		for _, s := range census.States {
			cen.Executions[s] = 0
		}
		for _, l := range lanes {
			cen.Lanes = append(cen.Lanes, l.Lane)
			for idx, n := range l.Counts {
				state, _, _ := strings.Cut(idx, ":") // blocked:budget counts as blocked
				if _, ok := cen.Executions[state]; ok {
					cen.Executions[state] += n
				}
			}
		}
		if earliestDelayed > 0 && earliestDelayed <= nowMs {
			cen.LagMs["pg_delayed_promoter"] = nowMs - earliestDelayed
		}
		return cen, nil
	}
}
