package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// TestShadowUnderDemoWorkload: the stock Valkey set runs under the demo
// workload (immediate, delayed, retried and DAG work) with a shadow of the
// live delayed_promoter, the same file: over the sweeps the shadow sees,
// every promotion the live version makes is one the candidate meant to
// make and no other (100 % agreement), the candidate never faults, and the
// workload loses nothing. (The promoter is the stock plugin this workload
// gives work on every sweep; lease_expiry, say, is only called when a
// lease is due, which a healthy workload never has.)
func TestShadowUnderDemoWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stock set under the demo workload")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	srv := valkeytest.NewServer(t)
	parts := model.PartitionConfig{Flow: 8, Budget: 2, Quota: 2}
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: srv.URL(), Partitions: parts, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	wcfg := workloadConfig{Rate: 40, Workers: 2, Concurrency: 4, Report: time.Second,
		Mix: map[string]int{kindImmediate: 2, kindDelayed: 3, kindRetry: 2, kindDAG: 1}}
	wcfg.fill()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: wcfg.Lanes, WaitpointHMACSecret: "0123456789abcdef0123456789abcdef"}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	stock, _ := filepath.Glob(filepath.Join("..", "..", "bin", "plugins", "*.wasm"))
	n := 0
	for _, p := range stock {
		name := strings.TrimSuffix(filepath.Base(p), ".wasm")
		if strings.HasPrefix(name, "pg_") {
			continue
		}
		install(t, p, filepath.Join(dir, name+".wasm"))
		n++
	}
	if n < 10 {
		t.Fatalf("stock set not built (run `make plugins`): %d plugins", n)
	}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: defaultCacheDir(), Backend: vc, Logger: valkeytest.Logger(),
		Debounce: 50 * time.Millisecond, Completions: host.CompletionConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	defer h.Stop()
	<-h.Started()
	shadowed := []string{"delayed_promoter"}
	for _, name := range shadowed {
		got, err := h.LoadShadow(ctx, filepath.Join(dir, name+".wasm"))
		if err != nil || got != name {
			t.Fatalf("LoadShadow(%s) = %q, %v", name, got, err)
		}
	}

	wcfg.DrainTimeout, wcfg.Logger = 90*time.Second, valkeytest.Logger()
	wctx, stopSubmitting := context.WithCancel(ctx)
	defer stopSubmitting()
	type result struct {
		sum workloadSummary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := runWorkload(wctx, vc, wcfg, io.Discard)
		done <- result{sum, err}
	}()
	// Enough sweeps for the promoter's shadow to have compared real
	// promotions (delayed and retried work falling due).
	valkeytest.Eventually(t, 4*time.Minute, "the promoter's shadow compares 40 calls and 20 promotions", func() bool {
		d, err := h.ShadowDiff("delayed_promoter")
		return err == nil && d.Calls >= 40 && d.Agree >= 20
	})
	stopSubmitting()
	res := <-done
	if res.err != nil {
		t.Fatalf("workload: %v", res.err)
	}
	if res.sum.Unfinished != 0 || res.sum.Dropped != 0 {
		t.Fatalf("workload lost or left work: %s", res.sum)
	}
	for _, name := range shadowed {
		d, err := h.ShadowDiff(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s shadow: %d calls compared (%d agreeing), %d actions agree, %d disagree, %d skipped, %d dry runs",
			name, d.Calls, d.AgreeingCalls, d.Agree, d.Disagree, d.Skipped, d.DryRuns)
		if d.Disagree != 0 || d.OnlyLive != 0 || d.OnlyCandidate != 0 || len(d.Samples) != 0 || d.AgreeRatio() != 1 {
			t.Errorf("%s: the live version's own shadow disagrees: %+v", name, d)
		}
		if d.Calls == 0 || d.AgreeingCalls != d.Calls || d.Faults != 0 {
			t.Errorf("%s: shadow = %+v; want compared calls, all agreeing, no faults", name, d)
		}
		if st, _ := h.Plugin(name); st.Faults != 0 {
			t.Errorf("%s: live faults: %+v", name, st)
		}
	}
}
