package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/sdk"
)

// runPostgresE2E measures create→claim→complete executions/s with W
// handlers on the throwaway cluster: fabric's SDK on Postgres (producers
// sdk.Client.CreateExecution, one sdk.Worker of concurrency W running Run)
// vs River (Insert + one client with MaxWorkers W) in its own database of
// the same cluster.
func runPostgresE2E(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n, rounds := e.size.PGJobs, max(e.size.PGRounds, 1)
	sc.Size = fmt.Sprintf("%d jobs per run, %d producers, W ∈ %v, %d rounds of fabric then River (1 ms cooldown) per W, cap %s per run",
		n, e.size.Producers, e.size.PGWorkers, rounds, e.size.RunCap)
	river := func(w int, cd time.Duration) (*peerResult, error) {
		url, err := e.postgresURL(ctx)
		if err != nil {
			return nil, err
		}
		return e.peer(ctx, "river-e2e", "-url", url, "-jobs", strconv.Itoa(n), "-workers", strconv.Itoa(w),
			"-producers", strconv.Itoa(e.size.Producers), "-fetch-cooldown", cd.String(), "-timeout", capArg(e.size.RunCap))
	}
	for _, w := range e.size.PGWorkers {
		// Rounds alternate fabric and River on the same machine, so that a
		// passing load (the machine's, autovacuum's) falls on both; each
		// row is the median of its rounds, every round in the note.
		var fabRates, riverRates []float64
		var capped []string
		var riverErr error
		riverVersion := ""
		for range rounds {
			fab, err := fabricPG(ctx, e, n, w)
			if err != nil {
				return fmt.Errorf("fabric W=%d: %w", w, err)
			}
			fabRates = append(fabRates, fab.rate())
			if fab.capped {
				capped = append(capped, "fabric"+fab.cappedNote())
			}
			pr, err := river(w, time.Millisecond)
			if err != nil {
				riverErr = err
				continue
			}
			riverVersion = pr.Version
			riverRates = append(riverRates, pr.PerSec)
			if pr.Capped {
				capped = append(capped, fmt.Sprintf("River capped at %s after %d of %d", e.size.RunCap, pr.Jobs, n))
			}
		}
		fabMedian, _, _ := percentiles(slices.Clone(fabRates))
		row := Row{Measure: fmt.Sprintf("executions/s, W=%d", w), Fabric: fabMedian, Unit: "/s", HigherIsBetter: true,
			Versus: "River", Goal: "≥ 1.0× River"}
		r := row
		r.Versus = "River " + riverVersion + " (FetchCooldown 1 ms, its minimum)"
		if len(riverRates) == 0 {
			r.Versus, r.Peer, r.Note = "River (FetchCooldown 1 ms, its minimum)", nan(), "River failed: "+riverErr.Error()
		} else {
			r.Peer, _, _ = percentiles(slices.Clone(riverRates))
			r.Note = fmt.Sprintf("median of %d rounds; fabric %s, River %s", rounds, rateList(fabRates), rateList(riverRates))
		}
		if len(capped) > 0 {
			r.Note += "; " + strings.Join(capped, "; ")
		}
		sc.Rows = append(sc.Rows, r)
		// River's defaults (100 ms between fetches, so at most W jobs per
		// 100 ms for instant jobs) once, beside fabric's median.
		d := row
		d.Measure, d.Goal = d.Measure+", River defaults", "(none set)"
		pr, err := river(w, 0)
		if err != nil {
			d.Versus, d.Peer, d.Note = "River (default config)", nan(), "River failed: "+err.Error()
		} else {
			d.Versus, d.Peer = "River "+pr.Version+" (default config)", pr.PerSec
			if pr.Capped {
				d.Note = fmt.Sprintf("River capped at %s after %d of %d", e.size.RunCap, pr.Jobs, n)
			}
		}
		sc.Rows = append(sc.Rows, d)
	}
	sc.Notes = append(sc.Notes,
		"fabric: sdk.Client.CreateExecution from the same producers as River's Insert, on a pool of producers + 2 connections (W + producers + 2 until 2026-12-02; River uses pgxpool's default, 4 here); ONE sdk.Connect worker of Concurrency W running Worker.Run, as River runs ONE client with MaxWorkers W (until 2026-12-02 this row ran W workers of concurrency 1). The worker claims as many executions as it has free slots in one statement (SELECT … FOR UPDATE SKIP LOCKED LIMIT n on the lane's partition), frees a slot when its handler returns, group-commits the completions that arrive while a flush is in flight (one statement per partition over arrays, each caller still answered for its own fence), and an idle worker wakes on LISTEN fabric_eligible (a trigger NOTIFYs when an execution becomes eligible; a client's creates on one partition and lane notify at most once per 10 ms inline, the quiet ones followed by one NOTIFY after they commit, since a NOTIFY serialises commits cluster-wide) instead of its poll backoff (10 ms to 500 ms); flow members on other partitions are found by those notifications and by a background scan once a second, on a connection of its own, of the partitions the statistics show in use. River (riverpgxv5) runs its own client with MaxWorkers W, once with FetchCooldown at its 1 ms minimum and once with its defaults (100 ms cooldown, 1 s poll); its completer batches completions in the background.",
		"The cluster is a throwaway one: fsync and synchronous_commit off for both.")
	return nil
}

func fabricPG(ctx context.Context, e *benchEnv, n, workers int) (e2eResult, error) {
	url, err := e.migratedPostgresURL(ctx)
	if err != nil {
		return e2eResult{}, err
	}
	// A connection for each producer and two for the worker, whatever W:
	// its claims go one at a time and its completions in one group commit
	// at a time (its LISTEN and background scan have connections of their
	// own). A connection per handler as well (W + producers + 2, until
	// 2026-12-02) only added idle backends, each loading the 256-way
	// partitioned tables' catalogs on first use: 1599-1654/s against
	// 1789-1791/s at W=8 in 6,000-execution runs.
	c, err := postgres.Connect(ctx, postgres.ClientConfig{URL: url, MaxConns: int32(e.size.Producers + 2), Logger: e.log})
	if err != nil {
		return e2eResult{}, err
	}
	defer c.Close()
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c, Logger: e.log})
	if err != nil {
		return e2eResult{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	wctx, stopWorkers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stopWorkers(); wg.Wait() }()
	// One worker of concurrency W, as River runs one client with
	// MaxWorkers W.
	w, err := sdk.Connect(ctx, c, sdk.WorkerConfig{WorkerID: "bench", Lanes: []string{benchLane}, Concurrency: workers, Logger: e.log})
	if err != nil {
		return e2eResult{}, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close(context.Background())
		_ = w.Run(wctx, func(context.Context, *sdk.Job) error {
			if done.Add(1) == int64(n) {
				close(all)
			}
			return nil
		})
	}()
	start := time.Now()
	err = produce(rctx, n, e.size.Producers, func(int) error {
		_, err := cl.CreateExecution(rctx, sdk.ExecutionSpec{Lane: benchLane, Payload: []byte("x")})
		return err
	})
	if err != nil && rctx.Err() == nil {
		return e2eResult{}, err
	}
	r := e2eResult{want: n}
	select {
	case <-all:
	case <-rctx.Done():
		r.capped = true
	}
	r.elapsed, r.done = time.Since(start), done.Load()
	return r, nil
}

// rateList prints rates in the order they were measured, "895, 910, 870/s".
func rateList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(parts, ", ") + "/s"
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
