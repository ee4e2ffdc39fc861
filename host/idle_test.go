//go:build linux

package host

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
)

// idleModule loads fixture name with its machine code in a file (as a
// host with a cache directory runs it) and returns it with a caller.
func idleModule(t *testing.T, name string) (*Module, *hostfn.Caller) {
	t.Helper()
	lc := benchLoader(t, benchCache(t))
	lc.codeDir = filepath.Join(t.TempDir(), codeDirName)
	m, err := loadModule(context.Background(), benchFixture(t, name), lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	man := m.Manifest()
	return m, &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: "{fp:0}", Stats: &hostfn.Stats{}, Logger: benchLogger()}
}

// codeResident is the resident size of m's machine code mapping in this
// process (smaps Rss: pages mapped here, not the page cache's).
func codeResident(t *testing.T, m *Module) int64 {
	t.Helper()
	liveCode.mu.Lock()
	u := liveCode.uses[m.codeKey]
	liveCode.mu.Unlock()
	if u == nil || !u.backed {
		t.Fatal("the module's machine code is not file-backed")
	}
	return mappingRss()[uintptr(unsafe.Pointer(unsafe.SliceData(u.code)))]
}

// TestIdleReleaseRecreates: an idle instance is released (its linear
// memory unmapped), the plugin's machine code pages are dropped once it
// holds none, and the next call makes a fresh instance that answers as
// the released one did, with its code faulted back in.
func TestIdleReleaseRecreates(t *testing.T) {
	ctx := context.Background()
	m, caller := idleModule(t, "healthy")
	in := scanInput(50)
	before, err := m.call(ctx, abi.ExportScan, in, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := pooled(m)
	if len(old) != 1 || old[0].mem.resident() == 0 {
		t.Fatalf("after a call: pool %v, want one instance with resident memory", old)
	}
	if codeResident(t, m) == 0 {
		t.Fatal("no machine code resident after a call")
	}
	// Not idle long enough: kept.
	if n := m.releaseIdle(ctx, time.Now(), time.Hour, 0); n != 0 || len(pooled(m)) != 1 {
		t.Fatalf("releaseIdle of a fresh instance released %d, pool %v", n, pooled(m))
	}
	if n := m.releaseIdle(ctx, time.Now().Add(2*time.Second), time.Second, 0); n != 1 {
		t.Fatalf("releaseIdle released %d instances, want 1", n)
	}
	if p := pooled(m); len(p) != 0 || m.instances() != 0 {
		t.Fatalf("after release: pool %v, instances %d", p, m.instances())
	}
	old[0].mem.mu.Lock()
	mems := len(old[0].mem.mems)
	old[0].mem.mu.Unlock()
	if mems != 0 || old[0].mem.resident() != 0 {
		t.Fatalf("released instance still holds %d memories, %d bytes resident", mems, old[0].mem.resident())
	}
	if r := codeResident(t, m); r != 0 {
		t.Fatalf("machine code still %d bytes resident after the plugin's last instance was released", r)
	}
	if m.idleReleases.Load() != 1 {
		t.Fatalf("idleReleases %d, want 1", m.idleReleases.Load())
	}

	after, err := m.call(ctx, abi.ExportScan, in, caller, nil)
	if err != nil {
		t.Fatalf("call after release: %v", err)
	}
	var res abi.ScanResult
	if err := res.UnmarshalBinary(after); err != nil || res.Scanned != 1 || !bytes.Equal(after, before) {
		t.Fatalf("call after release returned %+v (%v), %x; want %x", res, err, after, before)
	}
	fresh := pooled(m)
	if len(fresh) != 1 || fresh[0] == old[0] || !fresh[0].inited {
		t.Fatalf("after the call: pool %v, want one fresh initialised instance", fresh)
	}
	if codeResident(t, m) == 0 {
		t.Fatal("machine code not faulted back in by the call after release")
	}
}

// TestIdleReleaseKeepsWarm: a pinned plugin keeps its first instance
// however long it idles; extras beyond it are released.
func TestIdleReleaseKeepsWarm(t *testing.T) {
	ctx := context.Background()
	m, caller := idleModule(t, "healthy")
	m.poolSize = 2
	// Two calls at once leave two instances in the pool.
	errs := make(chan error, 2)
	start := make(chan struct{})
	for range 2 {
		go func() {
			<-start
			_, err := m.call(ctx, abi.ExportScan, scanInput(50), caller, nil)
			errs <- err
		}()
	}
	close(start)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for m.instances() < 2 { // the calls may have run one after the other
		inst, err := m.newInstance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		inst.idleSince = time.Now()
		m.pool = append(m.pool, inst)
		m.mu.Unlock()
	}
	first := pooled(m)[0]
	if n := m.releaseIdle(ctx, time.Now().Add(time.Hour), time.Second, 1); n != 1 {
		t.Fatalf("releaseIdle kept-warm released %d, want the one extra", n)
	}
	if p := pooled(m); len(p) != 1 || p[0] != first {
		t.Fatalf("pool after release %v, want the first instance %p kept", p, first)
	}
	if codeResident(t, m) == 0 {
		t.Fatal("code pages dropped while an instance is kept warm")
	}
}

// TestIdleAfterPolicy: dispatchers and due-time scanners are pinned warm
// by default, other plugins released after Config.IdleRelease; a disabled
// plugin is never pinned; PluginConfig.IdleRelease overrides either way,
// and a negative Config.IdleRelease pins every plugin.
func TestIdleAfterPolicy(t *testing.T) {
	h := &Host{cfg: Config{IdleRelease: time.Second, Plugins: map[string]PluginConfig{
		"pinned": {IdleRelease: -1}, "tuned": {IdleRelease: 5 * time.Second},
	}}}
	scanner := &Module{manifest: abi.Manifest{Kind: abi.KindScanner}}
	dueScanner := &Module{manifest: abi.Manifest{Kind: abi.KindScanner, Config: map[string]string{abi.ConfigWake: "ff:idx:*:delayed"}}}
	dispatcher := &Module{manifest: abi.Manifest{Kind: abi.KindDispatcher}}
	for _, tc := range []struct {
		name  string
		state State
		m     *Module
		want  time.Duration
	}{
		{"reconciler", StateRunning, scanner, time.Second},
		{"promoter", StateRunning, dueScanner, 0},
		{"dispatcher", StateRunning, dispatcher, 0},
		{"off", StateDisabled, dispatcher, time.Second},
		{"pinned", StateRunning, scanner, 0},
		{"tuned", StateRunning, dispatcher, 5 * time.Second},
	} {
		p := &plugin{h: h, name: tc.name, state: tc.state}
		if got := h.idleAfter(p, tc.m); got != tc.want {
			t.Errorf("%s: idleAfter %v, want %v", tc.name, got, tc.want)
		}
	}
	h.cfg.IdleRelease = -1
	if got := h.idleAfter(&plugin{h: h, name: "reconciler", state: StateRunning}, scanner); got != 0 {
		t.Errorf("with IdleRelease < 0: idleAfter %v, want 0 (pinned)", got)
	}
}
