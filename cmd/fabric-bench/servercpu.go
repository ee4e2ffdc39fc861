package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	vk "github.com/valkey-io/valkey-go"
)

// cpuSample is the server's CPU time so far (INFO cpu), in µs.
type cpuSample struct {
	us float64
	// main is true when the figure is the main thread's alone
	// (used_cpu_{sys,user}_main_thread); false when the server lacks those
	// fields and the process total (used_cpu_{sys,user}) stands in.
	main bool
}

// serverCPU reads INFO cpu: the main thread's sys+user CPU, or the whole
// process's when the main-thread fields are missing.
func (e *benchEnv) serverCPU(ctx context.Context) (cpuSample, error) {
	raw := e.stats.Raw()
	s, err := raw.Do(ctx, raw.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return cpuSample{}, fmt.Errorf("INFO cpu: %w", err)
	}
	f := map[string]float64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			f[k] = x
		}
	}
	sys, okS := f["used_cpu_sys_main_thread"]
	user, okU := f["used_cpu_user_main_thread"]
	if okS && okU {
		return cpuSample{us: (sys + user) * 1e6, main: true}, nil
	}
	return cpuSample{us: (f["used_cpu_sys"] + f["used_cpu_user"]) * 1e6}, nil
}

// cpuPerJob is the server CPU µs per job between two samples (NaN when a
// sample failed or nothing was done).
func cpuPerJob(before, after cpuSample, okB, okA bool, jobs int64) float64 {
	if !okB || !okA || jobs <= 0 {
		return nan()
	}
	return (after.us - before.us) / float64(jobs)
}

// cpuLabel names what a CPU row measured.
func cpuLabel(s cpuSample) string {
	if s.main {
		return "main thread"
	}
	return "process (no main-thread fields)"
}

// fcallCost is one ff_* function's server time per execution from SLOWLOG.
type fcallCost struct {
	fn           string
	usPerExec    float64
	callsPerExec float64
}

// fabricFCallCosts runs one fabric e2e run of n executions with W workers
// while SLOWLOG records every command (slowlog-log-slower-than 0), then
// sums the FCALL entries' durations by function. SLOWLOG's own overhead
// makes this run slower than the unrecorded one, so its rate is not
// reported; the configuration is restored afterwards.
func fabricFCallCosts(ctx context.Context, e *benchEnv, n, workers int) ([]fcallCost, float64, error) {
	raw := e.stats.Raw()
	cfg := func(k, v string) error {
		return raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue(k, v).Build()).Error()
	}
	// SLOWLOG keeps only its newest entries, and idle workers poll: the
	// log is drained (GET + RESET in one MULTI, so nothing falls between)
	// every 100 ms into the sums.
	if err := cfg("slowlog-max-len", "100000"); err != nil {
		return nil, 0, err
	}
	defer func() {
		_ = cfg("slowlog-log-slower-than", "10000")
		_ = cfg("slowlog-max-len", "128")
		_ = raw.Do(context.Background(), raw.B().SlowlogReset().Build()).Error()
	}()
	if err := raw.Do(ctx, raw.B().SlowlogReset().Build()).Error(); err != nil {
		return nil, 0, err
	}
	if err := cfg("slowlog-log-slower-than", "0"); err != nil {
		return nil, 0, err
	}
	us, calls := map[string]int64{}, map[string]int64{}
	var total int64
	drain := func() error {
		return raw.Dedicated(func(d vk.DedicatedClient) error {
			res := d.DoMulti(ctx, d.B().Multi().Build(), d.B().SlowlogGet().Count(-1).Build(),
				d.B().SlowlogReset().Build(), d.B().Exec().Build())
			out, err := res[len(res)-1].ToArray()
			if err != nil {
				return fmt.Errorf("SLOWLOG GET: %w", err)
			}
			entries, err := out[0].ToArray()
			if err != nil {
				return fmt.Errorf("SLOWLOG GET: %w", err)
			}
			for _, en := range entries {
				parts, err := en.ToArray()
				if err != nil || len(parts) < 4 {
					continue
				}
				dur, _ := parts[2].AsInt64()
				args, _ := parts[3].AsStrSlice()
				if len(args) < 2 || !strings.EqualFold(args[0], "fcall") {
					continue
				}
				us[args[1]] += dur
				calls[args[1]]++
				total += dur
			}
			return nil
		})
	}
	stop := make(chan struct{})
	drained := make(chan error, 1)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				drained <- nil
				return
			case <-t.C:
				if err := drain(); err != nil {
					drained <- err
					return
				}
			}
		}
	}()
	r, _, err := fabricE2E(ctx, e, n, workers)
	close(stop)
	if derr := <-drained; derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return nil, 0, err
	}
	if err := cfg("slowlog-log-slower-than", "-1"); err != nil {
		return nil, 0, err
	}
	if err := drain(); err != nil {
		return nil, 0, err
	}
	if r.done == 0 {
		return nil, 0, fmt.Errorf("no execution completed")
	}
	var out []fcallCost
	for fn, d := range us {
		out = append(out, fcallCost{fn: fn, usPerExec: float64(d) / float64(r.done), callsPerExec: float64(calls[fn]) / float64(r.done)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].usPerExec > out[j].usPerExec })
	return out, float64(total) / float64(r.done), nil
}

// fmtCosts renders "ff_claim_execution 97 µs (1.15 calls), ...".
func fmtCosts(cs []fcallCost) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %s µs (%s calls)", c.fn, fmtNum(c.usPerExec, ""), fmtNum(c.callsPerExec, "")))
	}
	return strings.Join(parts, ", ")
}
