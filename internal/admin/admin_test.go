package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// TestMain shares one Valkey server among the package's tests, and the
// pgtest cluster when a test starts it, and stops them at the end.
func TestMain(m *testing.M) {
	code := valkeytest.Run(m)
	if pgtest.Stop() != 0 {
		code = 1
	}
	os.Exit(code)
}

// cacheDir is the compilation cache `make plugins` prewarms.
func cacheDir(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "fabric", "wazero")
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	p, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "plugins", name+".wasm"))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("fixture %s.wasm is missing: run `make plugins` first", name)
	}
	return p
}

// grantFixtures is the stock policy with each named fixture granted what
// it requests.
func grantFixtures(t *testing.T, names ...string) *host.Policy {
	t.Helper()
	p := host.StockPolicy()
	for _, n := range names {
		in, err := host.Inspect(context.Background(), fixture(t, n), host.InspectConfig{CacheDir: cacheDir(t)})
		if err != nil {
			t.Fatalf("inspect %s: %v", n, err)
		}
		p.Plugins[in.Manifest.Name] = host.GrantOf(in.Manifest)
	}
	return &p
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func startServer(t *testing.T, cfg admin.ServerConfig) string {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	cfg.Logger = valkeytest.Logger()
	srv := admin.NewServer(cfg)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Stop)
	return "http://" + srv.Addr().String()
}

// metric returns the value of the first sample of series (a name with its
// label set) in a scrape, or -1.
func metric(body, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	client := valkeytest.Client(t)
	dir := t.TempDir()
	b, err := os.ReadFile(fixture(t, "healthy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "healthy.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	m := admin.NewMetrics()
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir(t), Backend: client, Logger: valkeytest.Logger(),
		Partitions: model.PartitionConfig{Flow: 2, Budget: 1, Quota: 1}, Observer: m, Policy: grantFixtures(t, "healthy")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(); h.Close(context.Background()) })
	s := admin.NewSampler(admin.SamplerConfig{Backend: client, Interval: 100 * time.Millisecond, Logger: valkeytest.Logger()})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	url := startServer(t, admin.ServerConfig{Host: h, Backend: client, Sampler: s, Metrics: m})

	series := []string{
		`fabric_plugin_cycles_total{plugin="healthy"}`,
		`fabric_plugin_calls_total{plugin="healthy"}`,
		`fabric_plugin_items_total{outcome="scanned",plugin="healthy"}`,
		`fabric_plugin_cycle_duration_seconds_count{plugin="healthy"}`,
		`fabric_plugin_host_calls_total{plugin="healthy"}`,
		// The fixture counts its scans itself with h.Metric.
		`fabric_plugin_guest_counter_total{name="scans",plugin="healthy"}`,
	}
	var first string
	valkeytest.Eventually(t, 60*time.Second, "healthy's series appear", func() bool {
		_, first = get(t, url+"/metrics")
		return metric(first, series[3]) > 0
	})
	for _, want := range []string{
		`fabric_plugin_info{plugin="healthy",state="running",version="1.0.0"} 1`,
		`fabric_plugin_swaps_total{plugin="healthy"} 0`,
		`fabric_plugin_host_calls_refused_total{plugin="healthy"} 0`,
		`fabric_plugin_quarantines_total{plugin="healthy"} 0`,
		`fabric_backend_up 1`,
		`fabric_executions{state="active"} 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(first) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	valkeytest.Eventually(t, 30*time.Second, "every per-plugin series moves", func() bool {
		_, next := get(t, url+"/metrics")
		for _, s := range series {
			if metric(next, s) <= metric(first, s) {
				return false
			}
		}
		return true
	})

	code, body := get(t, url+"/plugins")
	if code != http.StatusOK || !regexp.MustCompile(`"name": "healthy"`).MatchString(body) {
		t.Fatalf("/plugins: %d %s", code, body)
	}
	code, body = get(t, url+"/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	// /status names the host holding each partition, in compact ranges.
	valkeytest.Eventually(t, 30*time.Second, "/status shows the host's partition leases", func() bool {
		_, body := get(t, url+"/status")
		var rep admin.Report
		if err := json.Unmarshal([]byte(body), &rep); err != nil || rep.Census == nil || rep.Census.Ownership == nil {
			return false
		}
		o := rep.Census.Ownership
		return len(o.Hosts) == 1 && o.Hosts[0].Host == h.HostID() && o.Hosts[0].Live &&
			o.Hosts[0].Ranges["flow"] == "0-1" && o.Hosts[0].Ranges["quota"] == "0" && o.Hosts[0].Partitions == 4
	})
}

// staticSource is a fixed plugin list.
type staticSource []host.PluginStatus

func (s staticSource) Plugins() []host.PluginStatus { return s }
func (staticSource) Started() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestGuestMetrics: a plugin's own counters and gauges (h.Metric) are
// series of /metrics, typed as the plugin reported them.
func TestGuestMetrics(t *testing.T) {
	t.Parallel()
	m := admin.NewMetrics()
	m.Attach(staticSource{{Name: "p", Version: "1.0.0", State: host.StateRunning,
		Metrics: map[string]float64{"cancelled": 7, "queue_depth": 3.5}, MetricGauges: []string{"queue_depth"}}}, nil)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			switch {
			case mt.GetCounter() != nil:
				got[f.GetName()+"{"+labels+"}"] = "counter " + strconv.FormatFloat(mt.GetCounter().GetValue(), 'f', -1, 64)
			case mt.GetGauge() != nil:
				got[f.GetName()+"{"+labels+"}"] = "gauge " + strconv.FormatFloat(mt.GetGauge().GetValue(), 'f', -1, 64)
			}
		}
	}
	for series, want := range map[string]string{
		"fabric_plugin_guest_counter_total{name=cancelled,plugin=p,}": "counter 7",
		"fabric_plugin_guest_gauge{name=queue_depth,plugin=p,}":       "gauge 3.5",
	} {
		if got[series] != want {
			t.Errorf("%s = %q, want %q", series, got[series], want)
		}
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	client := valkeytest.Dial(t, srv.URL(), 0)
	url := startServer(t, admin.ServerConfig{Backend: client, ProbeTimeout: 500 * time.Millisecond})

	if code, body := get(t, url+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the server up: %d %s", code, body)
	}
	// No library loaded yet: alive, not ready.
	if code, body := get(t, url+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz without the library: %d %s", code, body)
	}
	srv.Kill()
	if code, body := get(t, url+"/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz with the server gone: %d %s", code, body)
	}
	ctx := valkeytest.Context(t, 20*time.Second)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	valkeytest.Eventually(t, 10*time.Second, "/healthz healthy again after restart", func() bool {
		code, _ := get(t, url+"/healthz")
		return code == http.StatusOK
	})
	if _, err := client.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, url+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the library: %d %s", code, body)
	}
}

func TestSamplerCensus(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 20*time.Second)
	client := valkeytest.Client(t)
	raw := client.Raw()
	now, err := client.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 7})
	for _, c := range []valkeyCmd{
		raw.B().Sadd().Key(model.KeyLanesIndex).Member("l1").Build(),
		raw.B().Zadd().Key(k.LaneDelayed("l1")).ScoreMember().ScoreMember(float64(now-5000), "a").ScoreMember(float64(now+60000), "b").Build(),
		raw.B().Zadd().Key(k.LaneActive("l1")).ScoreMember().ScoreMember(1, "c").Build(),
		raw.B().Zadd().Key(k.LeaseExpiry()).ScoreMember().ScoreMember(float64(now+60000), "c").Build(),
		raw.B().Zadd().Key(k.LaneBlockedBudget("l1")).ScoreMember().ScoreMember(1, "d").Build(),
	} {
		if err := raw.Do(ctx, c).Error(); err != nil {
			t.Fatal(err)
		}
	}
	s := admin.NewSampler(admin.SamplerConfig{Backend: client, Logger: valkeytest.Logger()})
	s.Sample(ctx)
	cen, _, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"eligible": 0, "delayed": 2, "active": 1, "suspended": 0, "blocked": 1, "terminal": 0}
	for st, n := range want {
		if cen.Executions[st] != n {
			t.Errorf("executions[%s] = %d, want %d (all %v)", st, cen.Executions[st], n, cen.Executions)
		}
	}
	if lag := cen.LagMs["delayed_promoter"]; lag < 5000 || lag > 15000 {
		t.Errorf("delayed_promoter lag %d ms, want about 5000", lag)
	}
	if lag, ok := cen.LagMs["lease_expiry"]; !ok || lag != 0 {
		t.Errorf("lease_expiry lag %d (%v), want 0: nothing due", lag, ok)
	}
}

type valkeyCmd = vk.Completed

// TestRejectedFiles: a file the host refuses is in /plugins, /status and
// /metrics with its reason, and leaves all three when it is removed; a
// broken version written over a file, then fixed, leaves them too.
func TestRejectedFiles(t *testing.T) {
	t.Parallel()
	client := valkeytest.Client(t)
	dir := t.TempDir()
	copyTo := func(name, dst string) {
		b, err := os.ReadFile(fixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, dst)); err != nil {
			t.Fatal(err)
		}
	}
	copyTo("healthy", "healthy.wasm")
	copyTo("notwasm", "notwasm.wasm")
	copyTo("truncated", "swapper.wasm")
	m := admin.NewMetrics()
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir(t), Backend: client, Logger: valkeytest.Logger(),
		Partitions: model.PartitionConfig{Flow: 2, Budget: 1, Quota: 1}, Observer: m, Debounce: 50 * time.Millisecond,
		Policy: grantFixtures(t, "healthy", "swap_v1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(); h.Close(context.Background()) })
	<-h.Started()
	url := startServer(t, admin.ServerConfig{Host: h, Backend: client, Metrics: m})

	rejected := func(file string) (inPlugins, inStatus, inMetrics bool, reason string) {
		var rows []host.PluginStatus
		if _, body := get(t, url+"/plugins"); json.Unmarshal([]byte(body), &rows) != nil {
			t.Fatalf("/plugins: %s", body)
		}
		for _, r := range rows {
			if r.Name == file && r.State == host.StateRejected {
				inPlugins, reason = true, r.Reason
			}
		}
		var rep admin.Report
		if _, body := get(t, url+"/status"); json.Unmarshal([]byte(body), &rep) != nil {
			t.Fatalf("/status: %s", body)
		}
		for _, f := range rep.Rejected {
			if filepath.Base(f.Path) == file {
				inStatus = true
			}
		}
		_, body := get(t, url+"/metrics")
		inMetrics = regexp.MustCompile(`(?m)^fabric_plugin_rejected\{file="` + regexp.QuoteMeta(file) + `",reason="[^"]+"\} 1$`).MatchString(body)
		return
	}
	for file, want := range map[string]string{"notwasm.wasm": "not wasm: ", "swapper.wasm": "truncated: "} {
		p, s, mt, reason := rejected(file)
		if !p || !s || !mt || !strings.HasPrefix(reason, want) {
			t.Fatalf("%s: in /plugins %v (reason %q), /status %v, /metrics %v: want all, reason %q...", file, p, reason, s, mt, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, "notwasm.wasm")); err != nil {
		t.Fatal(err)
	}
	copyTo("swap_v1", "swapper.wasm")
	for _, file := range []string{"notwasm.wasm", "swapper.wasm"} {
		valkeytest.Eventually(t, 30*time.Second, file+" no longer rejected anywhere", func() bool {
			p, s, mt, _ := rejected(file)
			return !p && !s && !mt
		})
	}
	if _, ok := h.Plugin("swapper"); !ok {
		t.Fatal("the fixed file did not load")
	}
}

// rejectingSource is a staticSource with rejected files.
type rejectingSource struct {
	staticSource
	rejected []host.FileStatus
}

func (s rejectingSource) Rejected() []host.FileStatus { return s.rejected }

// TestMetricsBadLabels: a plugin metric name that is not UTF-8, a 1 MiB
// one, and a rejected file whose name is not UTF-8 never fail /metrics:
// the bad series are left out (and counted), every other plugin's are
// served.
func TestMetricsBadLabels(t *testing.T) {
	t.Parallel()
	m := admin.NewMetrics()
	src := rejectingSource{staticSource: staticSource{
		{Name: "bomb", Version: "1.0.0", State: host.StateRunning, MetricsDropped: 3,
			Metrics: map[string]float64{"bad\xff\xfe": 1, strings.Repeat("m", 1<<20): 1, "scans": 4}},
		{Name: "healthy", Version: "1.0.0", State: host.StateRunning, Metrics: map[string]float64{"scans": 7}},
	}, rejected: []host.FileStatus{{Path: "/plugins/\xff.wasm", Reason: host.RejectNotWasm}}}
	url := startServer(t, admin.ServerConfig{Host: src, Backend: valkeytest.Client(t), Metrics: m})
	code, body := get(t, url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %.300s", code, body)
	}
	for series, want := range map[string]float64{
		`fabric_plugin_guest_counter_total{name="scans",plugin="healthy"}`:     7,
		`fabric_plugin_guest_counter_total{name="scans",plugin="bomb"}`:        4,
		`fabric_plugin_guest_metrics_dropped_total{plugin="bomb"}`:             3,
		`fabric_plugin_info{plugin="healthy",state="running",version="1.0.0"}`: 1,
	} {
		if got := metric(body, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if len(body) > 1<<20 {
		t.Errorf("the scrape is %d bytes: the 1 MiB name was served", len(body))
	}
	if metric(body, "fabric_metrics_series_skipped_total") < 1 {
		t.Error("the series with a label that is not UTF-8 were not counted as skipped")
	}
}
