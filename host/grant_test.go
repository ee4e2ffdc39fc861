package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// selfgrantKey is the key the selfgrant fixture writes when it runs.
const selfgrantKey = "ff:pa:selfgrant"

// selfgrantDiff is everything selfgrant requests that the stock policy
// does not grant it, in the order the host reports it.
const selfgrantDiff = "fcall ff_cancel_execution not granted; write ff:* not granted; cross_partition not granted"

// TestGrantRefusesSelfGrantingPlugin: a plugin whose manifest asks for
// write ff:*, cross-partition access and an FCALL of ff_cancel_execution
// is refused at load with the exact difference, writes
// nothing while a granted plugin beside it sweeps, and runs (and writes)
// once the operator grants all of it.
func TestGrantRefusesSelfGrantingPlugin(t *testing.T) {
	t.Parallel()
	stock := host.StockPolicy()
	healthy := fixturePolicy(t).Plugins["healthy"]
	stock.Plugins["healthy"] = healthy
	b := setup(t, setupOpts{fixtures: []string{"selfgrant", "healthy"}, store: true, policy: &stock})
	c := b.backend(t)

	var refused host.FileStatus
	for _, f := range b.host.Files() {
		if filepath.Base(f.Path) == "selfgrant.wasm" {
			refused = f
		}
	}
	if refused.State != host.StateInvalid || !strings.HasSuffix(refused.Error, "selfgrant: "+selfgrantDiff) {
		t.Fatalf("selfgrant.wasm: state %s, error %q; want invalid ending in %q", refused.State, refused.Error, selfgrantDiff)
	}
	if _, ok := b.host.Plugin("selfgrant"); ok {
		t.Fatal("selfgrant is listed as a plugin although it was refused")
	}
	// The granted plugin beside it sweeps several times (selfgrant's own
	// interval is the same 100 ms): the refused one wrote nothing.
	valkeytest.Eventually(t, 60*time.Second, "healthy sweeps 5 times", func() bool {
		st, _ := b.host.Plugin("healthy")
		return st.Cycles >= 5
	})
	n, err := c.Raw().Do(context.Background(), c.Raw().B().Exists().Key(selfgrantKey).Build()).AsInt64()
	if err != nil || n != 0 {
		t.Fatalf("EXISTS %s = %d, %v: the refused plugin wrote", selfgrantKey, n, err)
	}
	if st, _ := b.host.Plugin("healthy"); st.Granted == nil || st.Limits == nil || st.Limits.Timeout != 30*time.Second || st.Requested == nil {
		t.Fatalf("healthy status lacks its grant and limits: %+v %+v", st.Granted, st.Limits)
	}

	// Granted everything it asks for, it loads and runs.
	granted := host.StockPolicy()
	granted.Plugins["selfgrant"] = host.Grant{FCall: []string{"ff_cancel_execution"}, Write: []string{"ff:*"}, CrossPartition: true}
	g := setup(t, setupOpts{fixtures: []string{"selfgrant"}, store: true, policy: &granted})
	gc := g.backend(t)
	valkeytest.Eventually(t, 60*time.Second, "the granted selfgrant writes its key", func() bool {
		n, err := gc.Raw().Do(context.Background(), gc.Raw().B().Exists().Key(selfgrantKey).Build()).AsInt64()
		return err == nil && n == 1
	})
	st, _ := g.host.Plugin("selfgrant")
	if st.Limits == nil || st.Limits.MaxPages != abi.DefaultMaxPages {
		t.Fatalf("selfgrant limits %+v: want max_pages %d", st.Limits, abi.DefaultMaxPages)
	}
}

// TestGrantCheck: each kind of request beyond a grant is named; what is
// within (an equal or a covering glob, a smaller memory or timeout) is
// not; the operator's timeout is the ceiling of the effective limit.
func TestGrantCheck(t *testing.T) {
	t.Parallel()
	m := abi.Manifest{ABI: abi.Version, Name: "p", Version: "1.0.0", TimeoutMs: 8000, MaxPages: 512,
		Capabilities: abi.Capabilities{FCall: []string{"ff_a", "ff_b"}, Read: []string{"ff:exec:*:core", "ff:idx:lanes"},
			Write: []string{"ff:idx:*:x"}, SQL: []string{"s.one", "table.t"}, CrossPartition: true}}
	m.ApplyDefaults()
	p := host.Policy{Plugins: map[string]host.Grant{"p": {FCall: []string{"ff_a"}, Read: []string{"ff:exec:*"}, SQL: []string{"s.one"}, MaxPages: 256}}}
	g := p.For("p")
	err := g.Check(m)
	want := "fcall ff_b not granted; read ff:idx:lanes not granted; write ff:idx:*:x not granted; sql table.t not granted; cross_partition not granted; max_pages 512 > granted 256; timeout_ms 8000 > granted 5000"
	if !errors.Is(err, host.ErrNotGranted) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("Check = %v\nwant ...%s", err, want)
	}
	p.Default = host.Grant{Read: []string{"ff:idx:lanes"}, TimeoutMs: 10000}
	p.Plugins["p"] = host.GrantOf(m)
	g = p.For("p")
	if err := g.Check(m); err != nil {
		t.Fatalf("GrantOf: %v", err)
	}
	g.TimeoutMs = 2000
	if lim := g.Limits(m); lim.Timeout != 2*time.Second || lim.MaxPages != 512 || lim.MaxOutputBytes != host.GrantDefaultMaxOutputBytes || lim.CommandsPerSweep >= 0 || lim.CommandsPerSecond != host.GrantDefaultCommandsPerSecond {
		t.Fatalf("Limits = %+v", lim)
	}
	// A glob with '?' or a class never covers another by text.
	q := host.Policy{Plugins: map[string]host.Grant{"p": {Read: []string{"ff:?"}}}}
	qg := q.For("p")
	if err := qg.Check(abi.Manifest{Name: "p", Capabilities: abi.Capabilities{Read: []string{"ff:*"}}, MaxPages: 1, TimeoutMs: 1}); err == nil {
		t.Fatal("ff:? covers ff:*")
	}
	bad := host.Policy{Plugins: map[string]host.Grant{"p": {FCall: []string{"DEL"}}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "plugins.p.grant") {
		t.Fatalf("Validate of fcall DEL = %v", err)
	}
}

// TestStockPolicyGrantsStockPlugins: every stock plugin requests no more
// than its built-in grant (so `make run` works with no fabric.toml), and a
// plugin the policy does not name is granted nothing.
func TestStockPolicyGrantsStockPlugins(t *testing.T) {
	t.Parallel()
	p := host.StockPolicy()
	paths, _ := filepath.Glob(filepath.Join("..", "bin", "plugins", "*.wasm"))
	if len(paths) < 20 {
		t.Fatalf("%d stock plugins in bin/plugins: run make plugins", len(paths))
	}
	for _, path := range paths {
		in, err := host.Inspect(context.Background(), path, host.InspectConfig{CacheDir: cacheDir, Policy: &p})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if in.NotGranted != "" {
			t.Errorf("%s: stock grant lacks %s", in.Manifest.Name, in.NotGranted)
		}
		if _, ok := p.Plugins[in.Manifest.Name]; !ok {
			t.Errorf("%s has no stock grant", in.Manifest.Name)
		}
	}
	if g := p.For("stranger"); len(g.FCall)+len(g.Read)+len(g.Write)+len(g.SQL) != 0 || g.CrossPartition {
		t.Fatalf("an unnamed plugin is granted %+v", g)
	}
}
