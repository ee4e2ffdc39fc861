package main

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
)

// actingPlugins is a host whose one plugin acts on 1000 items a second.
type actingPlugins struct{ start time.Time }

func (a actingPlugins) Plugins() []host.PluginStatus {
	acted := uint32(time.Since(a.start).Milliseconds())
	return []host.PluginStatus{{Name: "pg_edge_cancel_reconciler", Version: "1.0.0", State: host.StateRunning,
		Totals: abi.ScanResult{Acted: acted}}}
}

func (actingPlugins) Started() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestStatusActedPerSecond: `fabric status` reads the admin server twice,
// --sample apart, and shows the plugin's rate (it showed 0.0 always: one
// read has no rate).
func TestStatusActedPerSecond(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 20*time.Second)
	as := admin.NewServer(admin.ServerConfig{Addr: "127.0.0.1:0", Backend: c, Host: actingPlugins{start: time.Now()}})
	if err := as.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(as.Stop)
	code, out, errOut := runCmd(t, "status", "--admin", "http://"+as.Addr().String(), "--sample", "300ms")
	if code != 0 {
		t.Fatalf("status: code %d\n%s", code, errOut)
	}
	m := regexp.MustCompile(`(?m)^pg_edge_cancel_reconciler +1\.0\.0 +running +\d+ +\d+ +([\d.]+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no aligned row for the plugin:\n%s", out)
	}
	if rate, _ := strconv.ParseFloat(m[1], 64); rate < 500 || rate > 2000 {
		t.Fatalf("ACTED/S %s, want about 1000:\n%s", m[1], out)
	}
}
