package sdk_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestPeriodicFiresOnBothBackends: on each backend two hosts run the
// backend's periodic plugin (periodic on Valkey, pg_periodic on Postgres)
// without partition leases, polling every 50 ms, so both race for every
// tick. A schedule every 200 ms added with the SDK then creates exactly
// one execution per tick — consecutive ticks, none skipped, each the
// tick's deterministic id with the schedule's kind, lane and tags — and
// ListPeriodic records the last one. After RemovePeriodic further scans
// of both hosts create nothing.
func TestPeriodicFiresOnBothBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, _ := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 5*time.Minute)
			plugin := "periodic"
			cfg := host.Config{Logger: valkeytest.Logger()}
			if v, ok := pgClients.Load(c); ok {
				pc := v.(*postgres.Client)
				plugin = "pg_periodic"
				cfg.Postgres, cfg.Partitions = pc.PluginSQL(), pc.Partitions()
			} else {
				v, _ := vkClients.Load(c)
				cfg.Backend, cfg.Partitions = v.(*valkey.Client), c.Partitions()
			}
			cfg.Plugins = map[string]host.PluginConfig{plugin: {Interval: 50 * time.Millisecond}}
			cfg.Timers.Disabled = true
			// The CLI's compilation cache, which `make plugins` prewarms
			// (a cold compile under -race takes minutes).
			if base, err := os.UserCacheDir(); err == nil {
				cfg.CacheDir = filepath.Join(base, "fabric", "wazero")
			}
			policy := host.StockPolicy()
			cfg.Policy = &policy
			var hosts []*host.Host
			for _, id := range []string{"host-a", "host-b"} {
				dir := t.TempDir()
				b, err := os.ReadFile(filepath.Join("..", "bin", "plugins", plugin+".wasm"))
				if err != nil {
					t.Fatalf("%v (run `make plugins`)", err)
				}
				if err := os.WriteFile(filepath.Join(dir, plugin+".wasm"), b, 0o644); err != nil {
					t.Fatal(err)
				}
				hc := cfg
				hc.PluginDir = dir
				hc.Leases.HostID, hc.Leases.Disabled = id, true
				h, err := host.New(hc)
				if err != nil {
					t.Fatalf("host.New %s: %v", id, err)
				}
				if err := h.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h.Stop(); h.Close(context.Background()) })
				hosts = append(hosts, h)
			}
			valkeytest.Eventually(t, 3*time.Minute, "both hosts loaded "+plugin, func() bool {
				for _, h := range hosts {
					if _, ok := h.Plugin(plugin); !ok {
						return false
					}
				}
				return true
			})

			const every = 200 * time.Millisecond
			name := "beat-" + be.name
			info, err := c.AddPeriodic(ctx, sdk.Periodic{Name: name, Every: every, Kind: "beat", Payload: []byte("hi")},
				sdk.WithLane("beats"), sdk.WithPriority(3), sdk.WithTag("app.team", "ops"))
			if err != nil {
				t.Fatal(err)
			}
			first := info.NextDue.UnixMilli()
			const ticks = 8
			var last sdk.PeriodicInfo
			defer func() {
				if t.Failed() {
					for _, h := range hosts {
						st, ok := h.Plugin(plugin)
						t.Logf("%s: %v %+v", plugin, ok, st)
					}
					t.Logf("schedule: %+v (first tick %d)", last, first)
				}
			}()
			valkeytest.Eventually(t, 3*time.Minute, "ticks fired", func() bool {
				l, err := c.ListPeriodic(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(l) != 1 {
					t.Fatalf("list = %+v", l)
				}
				last = l[0]
				return last.LastTick.UnixMilli() >= first+(ticks-1)*every.Milliseconds()
			})
			if err := c.RemovePeriodic(ctx, name); err != nil {
				t.Fatal(err)
			}
			if err := c.RemovePeriodic(ctx, name); !errors.Is(err, sdk.ErrPeriodicNotFound) {
				t.Fatalf("second remove: %v", err)
			}
			for _, h := range hosts {
				if st, ok := h.Plugin(plugin); !ok || st.Calls == 0 {
					t.Fatalf("a host never called %s: %+v", plugin, st)
				}
			}
			part := c.Partitions().SoloPartition("beats")
			// Every tick from the first to the last recorded has its
			// execution, created by the plugin from the schedule.
			n := 0
			tick := first
			for ; tick <= last.LastTick.UnixMilli(); tick += every.Milliseconds() {
				id := periodic.TickID(part, name, tick)
				st, err := c.State(ctx, id)
				if err != nil {
					t.Fatalf("tick %d (execution %s): %v", tick, id, err)
				}
				if st.Kind != "beat" || st.Lane != "beats" || st.Fields["priority"] != "3" {
					t.Fatalf("tick %d execution: %+v", tick, st)
				}
				n++
			}
			if last.LastExecutionID != periodic.TickID(part, name, last.LastTick.UnixMilli()) {
				t.Fatalf("last execution %s, tick %d", last.LastExecutionID, last.LastTick.UnixMilli())
			}
			// Once per tick: the lane holds one execution per tick fired.
			count := func() int {
				if v, ok := pgClients.Load(c); ok {
					var k int
					if err := v.(*postgres.Client).Pool().QueryRow(ctx,
						`SELECT count(*) FROM ff_exec_core WHERE lane_id = 'beats'`).Scan(&k); err != nil {
						t.Fatal(err)
					}
					return k
				}
				v, _ := vkClients.Load(c)
				raw := v.(*valkey.Client).Raw()
				k, err := raw.Do(ctx, raw.B().Scard().Key(model.KeysOn(part).AllExecutions()).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				return int(k)
			}
			before := count()
			if before < n || before > n+1 { // a tick may have fired between the list and the remove
				t.Fatalf("%d executions for %d ticks", before, n)
			}
			// Removed: more scan rounds of both hosts create nothing.
			calls := func() (k int64) {
				for _, h := range hosts {
					st, _ := h.Plugin(plugin)
					k += st.Calls
				}
				return k
			}
			after := calls()
			valkeytest.Eventually(t, time.Minute, "hosts scan on after the removal", func() bool {
				return calls() > after+20
			})
			if got := count(); got != before {
				t.Fatalf("%d executions after the removal, %d before", got, before)
			}
		})
	}
}
