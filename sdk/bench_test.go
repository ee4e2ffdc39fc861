package sdk_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// BenchmarkCreateClaimComplete measures end-to-end throughput: b.N
// executions created by 4 producers over 4 lanes while workers (each with
// concurrency 4) claim and complete them. It reports execs/s.
//
//	go test -run '^$' -bench CreateClaimComplete -benchtime 2000x ./sdk
func BenchmarkCreateClaimComplete(b *testing.B) {
	for _, tc := range []struct {
		workers, concurrency int
		lanes                []string
	}{
		{1, 4, []string{"bench-a", "bench-b", "bench-c", "bench-d"}},
		{8, 4, []string{"bench-a", "bench-b", "bench-c", "bench-d"}},
		// fabric-bench scenario 1's shape: workers of concurrency 1, one lane.
		{1, 1, []string{"bench"}},
		{8, 1, []string{"bench"}},
	} {
		workers := tc.workers
		b.Run(fmt.Sprintf("workers=%d,concurrency=%d,lanes=%d", workers, tc.concurrency, len(tc.lanes)), func(b *testing.B) {
			tb := setup(b, 0)
			tb.ctx = context.Background()
			lanes := tc.lanes
			var done atomic.Int64
			all := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			for i := 0; i < workers; i++ {
				w := tb.worker(b, sdk.WorkerConfig{WorkerID: "bench", Lanes: lanes, Concurrency: tc.concurrency})
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = w.Run(ctx, func(context.Context, *sdk.Job) error {
						if done.Add(1) == int64(b.N) {
							close(all)
						}
						return nil
					})
				}()
			}
			cmds0 := serverCalls(b, tb)
			b.ResetTimer()
			start := time.Now()
			var pwg sync.WaitGroup
			for p := 0; p < 4; p++ {
				pwg.Add(1)
				go func() {
					defer pwg.Done()
					for i := p; i < b.N; i += 4 {
						tb.create(b, sdk.ExecutionSpec{Lane: lanes[i%len(lanes)], Payload: []byte("x")})
					}
				}()
			}
			pwg.Wait()
			select {
			case <-all:
			case <-time.After(time.Minute):
				b.Fatalf("only %d of %d executions ran; %s", done.Load(), b.N, stuck(tb, lanes))
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "execs/s")
			cmds1 := serverCalls(b, tb)
			b.ReportMetric(float64(cmds1[""]-cmds0[""])/float64(b.N), "cmds/exec")
			var top []string
			for k, v := range cmds1 {
				if d := v - cmds0[k]; k != "" && d > int64(b.N) {
					top = append(top, fmt.Sprintf("%s=%.1f", k, float64(d)/float64(b.N)))
				}
			}
			sort.Strings(top)
			b.Logf("server commands per execution: %s", strings.Join(top, " "))
			cancel()
			wg.Wait()
		})
	}
}

// serverCalls is the server's command counts by command, and their total
// under "" (INFO commandstats, commands run inside FCALLs included). The server is shared by the
// package's tests, so the figure is exact only when the benchmark runs
// alone, as `-run '^$'` does.
func serverCalls(tb testing.TB, b *testBundle) map[string]int64 {
	raw := b.vc.Raw()
	info, err := raw.Do(b.ctx, raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		calls[strings.TrimPrefix(name, "cmdstat_")] += v
		calls[""] += v
	}
	return calls
}

// stuck describes the executions left on the lanes' eligible sets.
func stuck(tb *testBundle, lanes []string) string {
	raw := tb.vc.Raw()
	out := ""
	for _, l := range lanes {
		p := tb.c.Partitions().SoloPartition(l)
		ids, _ := raw.Do(tb.ctx, raw.B().Zrange().Key(model.KeysOn(p).LaneEligible(l)).Min("0").Max("-1").Build()).AsStrSlice()
		out += fmt.Sprintf("%s: %d eligible; ", l, len(ids))
		if len(ids) > 0 {
			m, _ := tb.vc.ExecutionCore(tb.ctx, model.ExecutionID(ids[0]))
			g, _ := raw.Do(tb.ctx, raw.B().Hgetall().Key(model.KeysFor(model.ExecutionID(ids[0])).ClaimGrant()).Build()).AsStrMap()
			out += fmt.Sprintf("first %v grant %v; ", m, g)
		}
	}
	return out
}
