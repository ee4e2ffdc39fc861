package main

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/sdk"
)

// opsE2E is fabric's wire floor for one job without the SDK's worker:
// producers CreateExecution; each handler reads the lane's eligible head
// on its solo partition (ZRANGE 0 W-1), pipelines ff_issue_claim_grant +
// ff_claim_execution, then CompleteExecution (HMGET pre-read + FCALL). It
// separates the cost of the Lua functions from the SDK's partition sweep.
func opsE2E(ctx context.Context, e *benchEnv, n, workers int) (e2eResult, map[string]float64, error) {
	vc, err := e.dial(ctx)
	if err != nil {
		return e2eResult{}, nil, err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		return e2eResult{}, nil, err
	}
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return e2eResult{}, nil, err
	}
	raw := vc.Raw()
	eligible := model.KeysOn(cl.Partitions().SoloPartition(benchLane)).LaneEligible(benchLane)
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := "bench-ops-" + strconv.Itoa(i)
			for rctx.Err() == nil && done.Load() < int64(n) {
				ids, err := raw.Do(rctx, raw.B().Zrange().Key(eligible).Min("0").Max(strconv.Itoa(workers-1)).Build()).AsStrSlice()
				if err != nil || len(ids) == 0 {
					sleepCtx(rctx, 200*time.Microsecond)
					continue
				}
				id := model.ExecutionID(ids[i%len(ids)])
				grant := (&fcall.IssueClaimGrantParams{ExecutionID: id, WorkerID: "bench", WorkerInstanceID: inst,
					Lane: benchLane, GrantTTLMs: 5000}).Call()
				claim := &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: "bench", WorkerInstanceID: inst, LaneID: benchLane, LeaseTTLMs: 30_000}
				res := vc.FCallBatch(rctx, []valkey.Call{grant, claim.Call()})
				if res[1].Err != nil {
					continue // another handler took it
				}
				cr := &valkey.ClaimResult{LeaseID: res[1].Reply.Field(0), AttemptID: res[1].Reply.Field(3)}
				epoch, _ := res[1].Reply.Int(1)
				cr.LeaseEpoch = uint64(epoch)
				if err := vc.CompleteExecution(rctx, &valkey.CompleteExecutionParams{ExecutionID: id, Fence: cr.Fence()}); err != nil {
					if rctx.Err() == nil && !errors.Is(err, context.Canceled) {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				if done.Add(1) == int64(n) {
					close(all)
				}
			}
		}()
	}
	defer wg.Wait()
	before, _ := e.commandStats(ctx)
	start := time.Now()
	err = produce(rctx, n, e.size.Producers, func(int) error {
		_, err := cl.CreateExecution(rctx, sdk.ExecutionSpec{Lane: benchLane, Payload: []byte("x")})
		return err
	})
	if err != nil && rctx.Err() == nil {
		return e2eResult{}, nil, err
	}
	r := e2eResult{want: n}
	select {
	case <-all:
	case <-rctx.Done():
		r.capped = true
	}
	r.elapsed, r.done = time.Since(start), done.Load()
	after, _ := e.commandStats(ctx)
	if err, ok := firstErr.Load().(error); ok {
		return r, nil, err
	}
	return r, perJob(before, after, r.done), nil
}

// commandStats reads INFO commandstats calls per command (server-wide).
func (e *benchEnv) commandStats(ctx context.Context) (map[string]int64, error) {
	calls, _, err := e.commandCounters(ctx)
	return calls, err
}

// commandCounters reads INFO commandstats once: each command's calls and
// total usec (server-wide; a script's nested commands are counted both
// under their own name and inside the FCALL's).
func (e *benchEnv) commandCounters(ctx context.Context) (calls, usec map[string]int64, err error) {
	raw := e.stats.Raw()
	s, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, nil, err
	}
	calls, usec = map[string]int64{}, map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls[name] = n
			case "usec":
				usec[name] = n
			}
		}
	}
	return calls, usec, nil
}

// perJob is the commandstats difference per completed job.
func perJob(before, after map[string]int64, jobs int64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 && jobs > 0 {
			out[k] = float64(d) / float64(jobs)
		}
	}
	return out
}

// topCommands renders the n costliest commands per job ("fcall 4.0, zrangebyscore 60").
func topCommands(m map[string]float64, n int) (total float64, top string) {
	type kv struct {
		k string
		v float64
	}
	var xs []kv
	for k, v := range m {
		if k == "info" {
			continue
		}
		xs = append(xs, kv{k, v})
		total += v
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].v > xs[j].v })
	var parts []string
	for i := 0; i < len(xs) && i < n; i++ {
		parts = append(parts, xs[i].k+" "+fmtNum(xs[i].v, ""))
	}
	return total, strings.Join(parts, ", ")
}
