package host_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// commandCalls sums the calls of every command in INFO commandstats,
// less the INFO calls themselves.
func commandCalls(t *testing.T, c *valkey.Client) int64 {
	t.Helper()
	raw := c.Raw()
	s, err := raw.Do(context.Background(), raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		total += n
	}
	return total
}

// timedPlugins are the plugins TestDueTimers runs: the two busiest
// due-index scanners (750 ms and 1.5 s), to keep the test light under
// -race on a shared machine.
var timedPlugins = []string{"delayed_promoter", "lease_expiry"}

type timerRun struct {
	idlePerSec float64
	lateness   []int64 // ms past delay_until, per promoted execution
}

// runTimers starts a host with the default plugin set at the engine's
// intervals over 256 partitions on db of a private server, measures idle
// commands/s once every due-timer plugin finished its first sweep, then
// the promotion lateness of delayed executions.
func runTimers(t *testing.T, srv *valkey.Server, db int, timers host.TimerConfig) timerRun {
	t.Helper()
	ctx := valkeytest.Context(t, 2*time.Minute)
	c := valkeytest.Dial(t, srv.URL(), db)
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range timedPlugins {
		copyFile(t, fixture(t, name), filepath.Join(dir, name+".wasm"))
	}
	logs := &logBuffer{}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir, Backend: c, Timers: timers,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	<-h.Started()
	parts := int64(c.Partitions().Flow)
	valkeytest.Eventually(t, 60*time.Second, "first sweeps done", func() bool {
		for _, name := range timedPlugins {
			if st, _ := h.Plugin(name); st.Calls < parts {
				return false
			}
		}
		return true
	})
	var run timerRun
	const window = 2 * time.Second
	before, start := commandCalls(t, c), time.Now()
	<-time.After(window) // a measurement window, not a synchronisation
	run.idlePerSec = float64(commandCalls(t, c)-before) / time.Since(start).Seconds()

	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	due := map[model.ExecutionID]int64{}
	for i := range 20 {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(rand.IntN(int(parts)))}, model.NewUUID())
		at := now + 400 + int64(i)*60
		if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "default", ExecutionKind: "k", DelayUntil: at}); err != nil {
			t.Fatal(err)
		}
		due[id] = at
	}
	for id, at := range due {
		var core map[string]string
		valkeytest.Eventually(t, 20*time.Second, string(id)+" promoted", func() bool {
			core, err = c.ExecutionCore(ctx, id)
			return err == nil && core["eligibility_state"] == "eligible_now"
		})
		promoted, _ := strconv.ParseInt(core["last_transition_at"], 10, 64)
		run.lateness = append(run.lateness, promoted-at)
	}
	slices.Sort(run.lateness)
	return run
}

func pct(v []int64, p float64) int64 { return v[int(float64(len(v)-1)*p)] }

// TestDueTimers measures, on a private server with 256 flow partitions and
// the delayed promoter and lease-expiry scanner at the engine's intervals, idle Valkey commands/s and
// the promotion lateness of delayed executions, with due-time timers and
// with FlowFabric's fixed polling. It asserts only what holds under -race
// on a loaded machine: timers cost fewer idle commands and never promote
// early; the figures are logged.
//
// Not parallel: the polling phase keeps two cores busy on purpose.
func TestDueTimers(t *testing.T) {
	srv := valkeytest.NewServer(t)
	on := runTimers(t, srv, 0, host.TimerConfig{})
	off := runTimers(t, srv, 1, host.TimerConfig{Disabled: true})
	t.Logf("idle commands/s over 256 partitions: timers %.0f, fixed polling %.0f", on.idlePerSec, off.idlePerSec)
	t.Logf("promotion lateness ms: timers p50 %d p99 %d max %d; fixed polling p50 %d p99 %d max %d",
		pct(on.lateness, 0.5), pct(on.lateness, 0.99), on.lateness[len(on.lateness)-1],
		pct(off.lateness, 0.5), pct(off.lateness, 0.99), off.lateness[len(off.lateness)-1])
	if on.idlePerSec >= off.idlePerSec {
		t.Errorf("timers-on idle commands/s %.0f not below polling %.0f", on.idlePerSec, off.idlePerSec)
	}
	for _, r := range [][]int64{on.lateness, off.lateness} {
		if r[0] < 0 {
			t.Errorf("promoted %d ms before its due time", -r[0])
		}
	}
}
