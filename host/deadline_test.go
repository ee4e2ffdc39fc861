package host

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
)

// starve keeps n goroutines spinning until the returned func is called:
// the calls beside them wait for a core most of the time, as on a host
// whose machine is starved.
func starve(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
			}
		}()
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

var starvers = 2

// deadlineModule loads fixture name with its host functions over the
// empty store, its clock answered by now (nil: 1,000,000 ms), and a
// Host whose callContext bounds its calls.
func deadlineModule(t *testing.T, name string, now func(context.Context) (int64, error)) (*Module, *hostfn.Caller, *Host) {
	t.Helper()
	lc := benchLoader(t, benchCache(t))
	if now != nil {
		lc.fns = hostfn.Functions(hostfn.Config{Store: emptyStore{}, Now: now})
	}
	m, err := loadModule(context.Background(), benchFixture(t, name), lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	man := m.Manifest()
	caller := &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: "{fp:0}", Stats: &hostfn.Stats{}, Logger: benchLogger()}
	return m, caller, &Host{cfg: Config{Clock: systemClock{}}}
}

// timedCall is one call of export under callContext's bounds for
// timeout (a proven plugin's, or not), with its wall time and its thread's CPU time (the call runs
// on this goroutine, bound to its thread here).
func timedCall(h *Host, m *Module, c *hostfn.Caller, export string, in []byte, timeout time.Duration, proven bool) (wall, cpu time.Duration, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	cpu0, _ := threadCPU()
	ctx, cancel := h.callContext(context.Background(), timeout, time.Time{}, "plugin."+c.Plugin+"."+export, proven)
	defer cancel()
	_, err = m.call(ctx, export, in, c, nil)
	wall = time.Since(start)
	cpu1, _ := threadCPU()
	return wall, cpu1 - cpu0, err
}

// starvedCall starts spinning goroutines (stop them with stop), one per
// P and doubling until a call of in takes at least 4× its CPU time on the
// wall clock, and returns that call's wall and CPU time.
func starvedCall(t *testing.T, h *Host, m *Module, c *hostfn.Caller, in []byte) (wall, cpu time.Duration, stop func()) {
	t.Helper()
	for n := runtime.GOMAXPROCS(0); ; n *= 2 {
		stop = starve(n)
		wall, cpu, err := timedCall(h, m, c, abi.ExportScan, in, time.Minute, true)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		t.Logf("%d spinning goroutines: %s of wall time, %s of CPU", n, wall, cpu)
		if wall >= 4*cpu {
			return wall, cpu, stop
		}
		stop()
		if n >= 64 {
			t.Fatalf("%d spinning goroutines did not starve a call", n)
		}
	}
}

// TestDeadlineStarvedCallDoesNotFault: a call that needs under half its
// timeout of CPU, run while spinning goroutines keep its goroutine off a
// core most of the time, takes longer than its timeout on the wall clock
// and still returns: its timeout is a budget of its own CPU time. (With a
// wall-clock deadline every such call was a timeout fault.)
func TestDeadlineStarvedCallDoesNotFault(t *testing.T) {
	if _, ok := threadCPU(); !ok {
		t.Skip("no thread CPU clock: the budget is of wall time here")
	}
	m, c, h := deadlineModule(t, "bench", nil)
	// Calibrate: a batch of now calls taking about 20 ms of CPU.
	_, cpu, err := timedCall(h, m, c, abi.ExportScan, scanInput(1000), time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	in := scanInput(uint32(max(1000, 1000*(20*time.Millisecond)/max(cpu, time.Microsecond))))
	wall, _, stop := starvedCall(t, h, m, c, in)
	defer stop()
	// A timeout the starved calls pass on the wall clock, at least 1.6×
	// the CPU time they need.
	timeout := wall * 2 / 5
	late := 0
	for i := range 5 {
		wall, cpu, err := timedCall(h, m, c, abi.ExportScan, in, timeout, true)
		t.Logf("call %d: %s of wall time, %s of CPU (timeout %s)", i, wall, cpu, timeout)
		if err != nil {
			t.Fatalf("starved call %d (%s wall, %s CPU, timeout %s): %v (%s)", i, wall, cpu, timeout, err, FaultKind(err))
		}
		if wall > timeout {
			late++
		}
	}
	if late == 0 {
		t.Fatalf("no starved call took longer than its %s timeout: the test did not starve them", timeout)
	}
}

// TestDeadlineStarvedHostileCut: the hostile fixtures that spin (a loop;
// a recursion with no loop) are still cut for timeout on a starved
// machine: once they used their timeout of CPU, or at the wall cap if
// the machine is so starved that that comes first.
func TestDeadlineStarvedHostileCut(t *testing.T) {
	const timeout = 100 * time.Millisecond
	stop := starve(runtime.GOMAXPROCS(0))
	defer stop()
	for _, name := range []string{"loop", "recurse_scan"} {
		m, c, h := deadlineModule(t, name, nil)
		wall, cpu, err := timedCall(h, m, c, abi.ExportScan, scanInput(50), timeout, true)
		t.Logf("%s: cut after %s of wall time, %s of CPU: %v", name, wall, cpu, err)
		var byCPU *cpuCut
		var byWall *wallCut
		switch {
		case FaultKind(err) != FaultTimeout:
			t.Fatalf("%s: %v (%s), want a timeout", name, err, FaultKind(err))
		case errors.As(err, &byCPU):
			// The stretch before the clock's first read is charged as
			// timeout/cpuArmShare: a starved call used less.
			if _, ok := threadCPU(); ok && cpu < timeout-timeout/cpuArmShare {
				t.Errorf("%s: cut after %s of CPU, under its %s budget", name, cpu, timeout)
			}
		case errors.As(err, &byWall) && !byWall.lease:
			if wall < wallCapFactor*timeout {
				t.Errorf("%s: cut after %s of wall time, before its %s cap", name, wall, wallCapFactor*timeout)
			}
		default:
			t.Fatalf("%s: %v, want a cut for its CPU or wall time", name, err)
		}
		if wall > wallCapFactor*timeout+time.Second {
			t.Errorf("%s: cut after %s of wall time, past its %s cap", name, wall, wallCapFactor*timeout)
		}
	}
}

// TestDeadlineWallCapCutsBlockedCall: a call that blocks in a host
// function (its clock never answers: no CPU used) is cut for timeout at
// wallCapFactor × its timeout.
func TestDeadlineWallCapCutsBlockedCall(t *testing.T) {
	const timeout = 20 * time.Millisecond
	m, c, h := deadlineModule(t, "bench", func(ctx context.Context) (int64, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	wall, cpu, err := timedCall(h, m, c, abi.ExportScan, scanInput(1_000_000), timeout, true)
	var cut *wallCut
	if FaultKind(err) != FaultTimeout || !errors.As(err, &cut) || cut.lease {
		t.Fatalf("blocked call: %v (%s), want a timeout at its wall cap", err, FaultKind(err))
	}
	if wall < wallCapFactor*timeout {
		t.Fatalf("blocked call cut after %s (%s of CPU), before its %s wall cap", wall, cpu, wallCapFactor*timeout)
	}
}

// TestDeadlineLeaseCutWhileOffCPU: a call cut at its leases' deadline
// while blocked in a host function (its clock never answers: it waits,
// as on a starved host or a slow backend) is cut as ErrLeaseEnded but is
// not a fault; a call that spun until then is one, unless it too spent
// most of its wall time off its CPU (this machine starved it).
func TestDeadlineLeaseCutWhileOffCPU(t *testing.T) {
	m, c, h := deadlineModule(t, "bench", func(ctx context.Context) (int64, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	ctx, cancel := h.callContext(context.Background(), time.Minute, time.Now().Add(50*time.Millisecond), "plugin.bench.fabric_scan", true)
	defer cancel()
	_, err := m.call(ctx, abi.ExportScan, scanInput(1_000_000), c, nil)
	if !errors.Is(err, ErrLeaseEnded) || !errors.Is(err, errStarved) || FaultKind(err) != "" || isFault(err) {
		t.Fatalf("blocked call under a lease of 50ms: %v (fault %q), want %v, not a fault", err, FaultKind(err), errStarved)
	}

	m, c, h = deadlineModule(t, "loop", nil)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	cpu0, _ := threadCPU()
	ctx, cancel = h.callContext(context.Background(), time.Minute, time.Now().Add(50*time.Millisecond), "plugin.looper.fabric_scan", true)
	defer cancel()
	_, err = m.call(ctx, abi.ExportScan, scanInput(50), c, nil)
	cpu1, _ := threadCPU()
	wall, cpu := time.Since(start), cpu1-cpu0
	t.Logf("loop under a lease of 50ms: %s of wall time, %s of CPU: %v", wall, cpu, err)
	if !errors.Is(err, ErrLeaseEnded) {
		t.Fatalf("loop under a lease of 50ms: %v, want %v", err, ErrLeaseEnded)
	}
	// The classification reads the clock a check before the cut: allow
	// one check interval's CPU (well under a millisecond) either way.
	switch spun := cpu >= wall/2+time.Millisecond; {
	case spun && (FaultKind(err) != FaultTimeout || !isFault(err)):
		t.Fatalf("loop on CPU %s of its %s: %v (fault %q), want a timeout fault", cpu, wall, err, FaultKind(err))
	case cpu < wall/2-time.Millisecond && isFault(err):
		t.Fatalf("loop on CPU %s of its %s (starved): %v, want no fault", cpu, wall, err)
	}
}

// TestDeadlineUnprovenCutAtTimeout: a plugin that never returned gets no
// leniency — its call is cut at its timeout of wall time, as before,
// starved or not.
func TestDeadlineUnprovenCutAtTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	stop := starve(runtime.GOMAXPROCS(0))
	defer stop()
	m, c, h := deadlineModule(t, "loop", nil)
	wall, cpu, err := timedCall(h, m, c, abi.ExportScan, scanInput(50), timeout, false)
	var cut *wallCut
	if FaultKind(err) != FaultTimeout || !errors.As(err, &cut) || cut.cap || cut.lease {
		t.Fatalf("unproven loop: %v (%s), want a timeout at its wall-clock timeout", err, FaultKind(err))
	}
	if wall < timeout {
		t.Fatalf("unproven loop cut after %s (%s of CPU), before its %s timeout", wall, cpu, timeout)
	}
}
