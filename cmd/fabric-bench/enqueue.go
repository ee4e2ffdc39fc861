package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/sdk"
)

// runEnqueueOpts measures enqueues/s with options: fabric's
// Client.Enqueue with lane, priority, retry, attempt timeout, delay (1 h,
// so nothing runs), idempotency key and a tag, against asynq's
// Client.Enqueue with queue, max retry, timeout, process-in and task id
// (bench/peers), each from P producers on the same server.
func runEnqueueOpts(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n, p := e.size.E2EJobs, e.size.Producers
	sc.Size = fmt.Sprintf("%d enqueues, %d producers, cap %s per run", n, p, e.size.RunCap)
	u0, _ := e.serverUsec(ctx)
	fab, err := fabricEnqueueOpts(ctx, e, n, p)
	if err != nil {
		return err
	}
	u1, _ := e.serverUsec(ctx)
	row := Row{Measure: "enqueues/s with options", Fabric: fab.rate(), Unit: "/s", HigherIsBetter: true,
		OfLimit: fab.rate() / e.limitOr1(), Note: fab.cappedNote()}
	pr, err := e.peer(ctx, "asynq-enqueue-opts", "-socket", e.vsrv.Socket(), "-db", strconv.Itoa(e.freshDB()),
		"-jobs", strconv.Itoa(n), "-producers", strconv.Itoa(p), "-timeout", capArg(e.size.RunCap))
	if err != nil {
		row.Versus, row.Missing = "asynq", "comparison failed: "+err.Error()
	} else {
		row.Versus, row.Peer = "asynq "+pr.Version, pr.PerSec
		if pr.Capped {
			row.Note += fmt.Sprintf("; asynq capped after %d of %d", pr.Jobs, n)
		}
	}
	u2, _ := e.serverUsec(ctx)
	if fab.done > 0 && pr != nil && pr.Jobs > 0 {
		if row.Note != "" {
			row.Note += "; "
		}
		row.Note += fmt.Sprintf("server time per enqueue: fabric %.0f µs (FCALL ff_create_execution), asynq %.0f µs (EVALSHA)",
			float64(u1-u0)/float64(fab.done), float64(u2-u1)/float64(pr.Jobs))
	}
	sc.Rows = append(sc.Rows, row)

	// The same enqueues in batches of enqueueBatch (EnqueueMany: one
	// pipelined round trip per batch); asynq has no batch enqueue, so its
	// one-by-one figure is the comparison.
	u3, _ := e.serverUsec(ctx)
	bat, err := fabricEnqueueOptsBatched(ctx, e, n, p)
	if err != nil {
		return err
	}
	u4, _ := e.serverUsec(ctx)
	brow := Row{Measure: fmt.Sprintf("enqueues/s with options, EnqueueMany of %d", enqueueBatch), Fabric: bat.rate(),
		Unit: "/s", HigherIsBetter: true, OfLimit: bat.rate() / e.limitOr1(), Note: bat.cappedNote()}
	if pr != nil {
		brow.Versus, brow.Peer = "asynq "+pr.Version+" (one by one: no batch API)", pr.PerSec
	} else {
		brow.Versus, brow.Missing = "asynq", row.Missing
	}
	if bat.done > 0 {
		if brow.Note != "" {
			brow.Note += "; "
		}
		brow.Note += fmt.Sprintf("server time per enqueue: fabric %.0f µs", float64(u4-u3)/float64(bat.done))
	}
	sc.Rows = append(sc.Rows, brow)
	sc.Notes = append(sc.Notes,
		"fabric: sdk.Client.Enqueue(kind, payload, WithLane, WithPriority(5), WithRetry(3, fixed 1 s), WithAttemptTimeout(30 s), WithDelay(1 h), WithIdempotencyKey(unique), WithTag); every option is validated before the one ff_create_execution call.",
		fmt.Sprintf("fabric batched: the same options through sdk.BuildSpec, sent with sdk.Client.EnqueueMany %d specs at a time (one pipelined round trip per batch), from the same P producers.", enqueueBatch),
		"asynq: Client.Enqueue(task, Queue, MaxRetry(3), Timeout(30 s), ProcessIn(1 h), TaskID(unique)); asynq has no per-task priority or tags.")
	return nil
}

func fabricEnqueueOpts(ctx context.Context, e *benchEnv, n, producers int) (e2eResult, error) {
	vc, err := e.dial(ctx)
	if err != nil {
		return e2eResult{}, err
	}
	defer vc.Close()
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return e2eResult{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	errs := make(chan error, producers)
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += producers {
				_, err := cl.Enqueue(rctx, "bench", []byte(`{"n":1}`), sdk.WithLane("bench-opts"), sdk.WithPriority(5),
					sdk.WithRetry(3, sdk.FixedBackoff(time.Second)), sdk.WithAttemptTimeout(30*time.Second),
					sdk.WithDelay(time.Hour), sdk.WithIdempotencyKey("job-"+strconv.Itoa(i)), sdk.WithTag("app.bench", "1"))
				if err != nil {
					if rctx.Err() == nil {
						errs <- err
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return e2eResult{}, fmt.Errorf("enqueue: %w", err)
	}
	return e2eResult{done: done.Load(), elapsed: time.Since(start), capped: rctx.Err() != nil, want: n}, nil
}

// enqueueBatch is the batch size of scenario 9's EnqueueMany row.
const enqueueBatch = 100

func fabricEnqueueOptsBatched(ctx context.Context, e *benchEnv, n, producers int) (e2eResult, error) {
	vc, err := e.dial(ctx)
	if err != nil {
		return e2eResult{}, err
	}
	defer vc.Close()
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return e2eResult{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	errs := make(chan error, producers)
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]sdk.ExecutionSpec, 0, enqueueBatch)
			flush := func() bool {
				if len(batch) == 0 {
					return true
				}
				if _, err := cl.EnqueueMany(rctx, batch...); err != nil {
					if rctx.Err() == nil {
						errs <- err
					}
					return false
				}
				done.Add(int64(len(batch)))
				batch = batch[:0]
				return true
			}
			for i := p; i < n; i += producers {
				spec, err := sdk.BuildSpec("bench", []byte(`{"n":1}`), sdk.WithLane("bench-batch"), sdk.WithPriority(5),
					sdk.WithRetry(3, sdk.FixedBackoff(time.Second)), sdk.WithAttemptTimeout(30*time.Second),
					sdk.WithDelay(time.Hour), sdk.WithIdempotencyKey("batch-"+strconv.Itoa(i)), sdk.WithTag("app.bench", "1"))
				if err != nil {
					errs <- err
					return
				}
				if batch = append(batch, spec); len(batch) == enqueueBatch && !flush() {
					return
				}
			}
			flush()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return e2eResult{}, fmt.Errorf("enqueue many: %w", err)
	}
	return e2eResult{done: done.Load(), elapsed: time.Since(start), capped: rctx.Err() != nil, want: n}, nil
}

// serverUsec is the time the server spent in script calls (FCALL,
// EVALSHA, EVAL) in µs, from INFO commandstats.
func (e *benchEnv) serverUsec(ctx context.Context) (int64, error) {
	raw := e.stats.Raw()
	s, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		// Commands run inside scripts have lines of their own: count only
		// the script calls, which include them.
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "fcall", "evalsha", "eval":
		default:
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total, nil
}
