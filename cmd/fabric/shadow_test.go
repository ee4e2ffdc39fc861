package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/model"
)

// TestShadowCLI drives a running host's safe change through the CLI and
// the admin API: shadow (refused without the token), diff, the shadow's
// series on /metrics and /plugins, promote, rollback.
func TestShadowCLI(t *testing.T) {
	t.Parallel()
	const token = "shadow-token-7"
	cache := defaultCacheDir()
	vc := valkeytest.Client(t)
	dir := t.TempDir()
	b, err := os.ReadFile(fixture(t, "swap_v1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "swapper.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	policy := host.StockPolicy()
	in, err := host.Inspect(context.Background(), fixture(t, "swap_v1"), host.InspectConfig{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	policy.Plugins[in.Manifest.Name] = host.GrantOf(in.Manifest)
	// Compiled ahead, as `fabric plugins validate` does before a deploy:
	// the upload below then compiles nothing within its 30 s.
	if _, err := host.Inspect(context.Background(), fixture(t, "swap_v2"), host.InspectConfig{CacheDir: cache}); err != nil {
		t.Fatal(err)
	}
	m := admin.NewMetrics()
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cache, Backend: vc, Logger: valkeytest.Logger(), Observer: m,
		Partitions: model.PartitionConfig{Flow: 2, Budget: 1, Quota: 1}, Policy: &policy})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(); h.Close(context.Background()) })
	<-h.Started()
	srv := admin.NewServer(admin.ServerConfig{Addr: "127.0.0.1:0", Host: h, Backend: vc, Metrics: m, AdminToken: token, Logger: valkeytest.Logger()})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	addr := "http://" + srv.Addr().String()
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := run(t, append(args, "--admin", addr)...)
		if code != want {
			t.Fatalf("fabric %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	scrape := func(path string) string {
		resp, err := http.Get(addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}

	if out := cli(1, "plugins", "shadow", fixture(t, "swap_v2")); !strings.Contains(out, "403") || !strings.Contains(out, adminTokenEnv) {
		t.Fatalf("shadow without the token: %s", out)
	}
	if out := cli(1, "plugins", "diff", "swapper"); !strings.Contains(out, "404") {
		t.Fatalf("diff without a shadow: %s", out)
	}
	if out := cli(0, "plugins", "shadow", "--admin-token-file", tokFile, fixture(t, "swap_v2")); !strings.Contains(out, "swapper: shadow 2.0.0") || !strings.Contains(out, "beside live 1.0.0") {
		t.Fatalf("shadow: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, host.ShadowDir, "swapper.wasm")); err != nil {
		t.Fatalf("the uploaded candidate is not kept in the shadow directory: %v", err)
	}
	valkeytest.Eventually(t, 60*time.Second, "the shadow compares 4 calls", func() bool {
		d, err := h.ShadowDiff("swapper")
		return err == nil && d.Calls >= 4
	})
	out := cli(0, "plugins", "diff", "swapper")
	for _, want := range []string{"swapper: shadow 2.0.0", "compared", "agreement 100.0 %"} {
		if !strings.Contains(out, want) {
			t.Fatalf("diff lacks %q:\n%s", want, out)
		}
	}
	if body := scrape("/metrics"); !strings.Contains(body, `fabric_plugin_shadow_calls_total{outcome="agreeing",plugin="swapper"}`) ||
		!strings.Contains(body, `fabric_plugin_shadow_agree_ratio{plugin="swapper"} 1`) {
		t.Fatalf("/metrics lacks the shadow's series")
	}
	if body := scrape("/plugins"); !strings.Contains(body, `"shadow": {`) {
		t.Fatalf("/plugins lacks the shadow:\n%s", body)
	}
	if out := cli(0, "plugins", "promote", "--admin-token-file", tokFile, "swapper"); !strings.Contains(out, "swapper: promoted; live 2.0.0") {
		t.Fatalf("promote: %s", out)
	}
	if st, _ := h.Plugin("swapper"); st.Version != "2.0.0" || st.Shadow != nil {
		t.Fatalf("after promote: %+v", st)
	}
	if out := cli(0, "plugins", "rollback", "--admin-token-file", tokFile, "swapper"); !strings.Contains(out, "swapper: rolled back; live 1.0.0") {
		t.Fatalf("rollback: %s", out)
	}
	if out := cli(1, "plugins", "rollback", "--admin-token-file", tokFile, "swapper"); !strings.Contains(out, "404") {
		t.Fatalf("a second rollback: %s", out)
	}
}
