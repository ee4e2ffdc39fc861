package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
)

// TestTerminationStub: on linux/amd64 the exports fabric calls run with
// the thinned termination check (termcheck_amd64.go) — a wazero upgrade
// that moves the slot fails here rather than silently slowing every call —
// and a guest looping forever is still cut at its deadline, reported as a
// timeout, and its module can be closed.
func TestTerminationStub(t *testing.T) {
	t.Parallel()
	m, err := loadModule(context.Background(), benchFixture(t, "loop"), benchLoader(t, benchCache(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	inst, err := m.newInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.close(context.Background())
	f := inst.export(abi.ExportScan, m.term)
	if f == nil {
		t.Fatal("loop fixture exports no fabric_scan")
	}
	if want := runtime.GOOS == "linux" && runtime.GOARCH == "amd64"; m.term.patch(f) != want {
		t.Fatalf("fabric_scan patched = %v, want %v on %s/%s", !want, want, runtime.GOOS, runtime.GOARCH)
	}
	man := m.Manifest()
	caller := &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: "{fp:0}", Stats: &hostfn.Stats{}, Logger: benchLogger()}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, fmt.Errorf("%w: loop after 300ms", ErrTimeout))
	defer cancel()
	start := time.Now()
	_, err = m.callInstance(ctx, inst, abi.ExportScan, scanInput(1), caller)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("looping call returned %v, want a timeout", err)
	}
	t.Logf("looping call cut after %s (deadline 300ms)", time.Since(start))
}
