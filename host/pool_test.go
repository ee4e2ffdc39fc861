package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
)

// poolModule loads fixture name with one warm instance and returns it
// with a caller for its scans.
func poolModule(t *testing.T, name string, recycleBytes int64) (*Module, *hostfn.Caller) {
	t.Helper()
	lc := benchLoader(t, benchCache(t))
	lc.poolSize, lc.recycleBytes = 1, recycleBytes
	m, err := loadModule(context.Background(), benchFixture(t, name), lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	man := m.Manifest()
	return m, &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: "{fp:0}", Stats: &hostfn.Stats{}, Logger: benchLogger()}
}

// pooled returns the module's idle instances.
func pooled(m *Module) []*instance {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*instance(nil), m.pool...)
}

// waitReplaced polls until the pool holds one initialised instance other
// than old.
func waitReplaced(t *testing.T, m *Module, old *instance) *instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p := pooled(m); len(p) == 1 && p[0] != old && p[0].inited {
			return p[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %v: no initialised replacement of the discarded instance", pooled(m))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoolKeepsOneInstance: a plugin keeps one warm instance (the one that
// read its manifest) and reuses it call after call.
func TestPoolKeepsOneInstance(t *testing.T) {
	m, caller := poolModule(t, "healthy", 0)
	first := pooled(m)
	if len(first) != 1 || !first[0].inited {
		t.Fatalf("after load: pool %v, want one initialised instance", first)
	}
	for range 3 {
		if _, err := m.call(context.Background(), abi.ExportScan, scanInput(50), caller, nil); err != nil {
			t.Fatal(err)
		}
		if p := pooled(m); len(p) != 1 || p[0] != first[0] {
			t.Fatalf("after a call: pool %v, want the same one instance %p", p, first[0])
		}
	}
}

// TestPoolRefillsAfterFault: the instance of a call that trapped is
// discarded and its replacement is started, initialised, before the next
// call needs it.
func TestPoolRefillsAfterFault(t *testing.T) {
	m, caller := poolModule(t, "trap", 0)
	first := pooled(m)
	if len(first) != 1 {
		t.Fatalf("after load: pool %v, want one instance", first)
	}
	if _, err := m.call(context.Background(), abi.ExportScan, scanInput(50), caller, nil); !errors.Is(err, ErrTrap) {
		t.Fatalf("scan of trap: %v, want ErrTrap", err)
	}
	waitReplaced(t, m, first[0])
}

// TestPoolRecyclesGrownMemory: an instance whose linear memory is past
// RecycleBytes after a call is replaced by a fresh one.
func TestPoolRecyclesGrownMemory(t *testing.T) {
	m, caller := poolModule(t, "healthy", 1<<20) // a Go guest starts at ~3.5 MiB
	first := pooled(m)
	if len(first) != 1 {
		t.Fatalf("after load: pool %v, want one instance", first)
	}
	if _, err := m.call(context.Background(), abi.ExportScan, scanInput(50), caller, nil); err != nil {
		t.Fatal(err)
	}
	waitReplaced(t, m, first[0])
}
