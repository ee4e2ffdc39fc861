package host_test

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestPeriodicExactlyOncePerTickAcrossHosts: two hosts run the periodic
// .wasm without partition leases, so both scan the schedule's partition
// every 50 ms and race for every tick. A schedule every 200 ms then yields
// exactly one execution per tick: the ticks of the created executions are
// distinct, aligned on the schedule's anchor, and consecutive (none
// skipped), each execution carries the tick's deterministic id, and the
// schedule records the last one. After RemovePeriodic no execution is
// created.
func TestPeriodicExactlyOncePerTickAcrossHosts(t *testing.T) {
	t.Parallel()
	periodicAcrossHosts(t, periodicOpts{poll: 50 * time.Millisecond, noLeases: true, noTimers: true})
}

// TestPeriodicOnTimersWithLeases: the production configuration (partition
// leases and due-time timers on, the manifest's 1 s interval): the timers
// wake the schedule's partition at each 200 ms tick, so the ticks still
// fire once each and none is skipped; the log reports how late they were
// created.
func TestPeriodicOnTimersWithLeases(t *testing.T) {
	t.Parallel()
	periodicAcrossHosts(t, periodicOpts{})
}

type periodicOpts struct {
	poll               time.Duration // 0: the manifest's interval
	noLeases, noTimers bool
}

func periodicAcrossHosts(t *testing.T, o periodicOpts) {
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 6*time.Minute) // starting two hosts under -race on a loaded machine can take minutes
	if _, err := c.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().Hset().Key(model.KeyConfigPartitions).FieldValue().
		FieldValue(model.ConfigFieldFlowPartitions, "4").FieldValue(model.ConfigFieldBudgetPartitions, "2").
		FieldValue(model.ConfigFieldQuotaPartitions, "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// The stock policy: periodic runs under its built-in grant.
	policy := host.StockPolicy()
	var hosts []*host.Host
	for _, id := range []string{"host-a", "host-b"} {
		dir := t.TempDir()
		copyFile(t, fixture(t, "periodic"), filepath.Join(dir, "periodic.wasm"))
		h, err := host.New(host.Config{
			PluginDir: dir, CacheDir: cacheDir, Policy: &policy,
			Backend:    valkeytest.Dial(t, srv.URL(), 0),
			Logger:     valkeytest.Logger(),
			Partitions: model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2},
			Plugins:    map[string]host.PluginConfig{"periodic": {Interval: o.poll}},
			Timers:     host.TimerConfig{Disabled: o.noTimers},
			Leases:     partlease.Config{HostID: id, Disabled: o.noLeases},
		})
		if err != nil {
			t.Fatalf("host.New %s: %v", id, err)
		}
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		hosts = append(hosts, h)
	}
	for _, h := range hosts {
		select {
		case <-h.Started():
		case <-ctx.Done():
			t.Fatal("a host did not start")
		}
	}

	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	const every = 200 * time.Millisecond
	info, err := client.AddPeriodic(ctx, sdk.Periodic{Name: "heartbeat", Every: every, Kind: "beat", Payload: []byte("hi")},
		sdk.WithLane("beats"), sdk.WithPriority(3), sdk.WithTag("app.team", "ops"))
	if err != nil {
		t.Fatal(err)
	}
	first := info.NextDue.UnixMilli()
	const ticks = 10
	valkeytest.Eventually(t, 2*time.Minute, "ten ticks fired", func() bool {
		l, err := client.ListPeriodic(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(l) == 1 && l[0].LastTick.UnixMilli() >= first+(ticks-1)*every.Milliseconds()
	})
	if o.noLeases {
		for _, h := range hosts {
			if st, ok := h.Plugin("periodic"); !ok || st.Calls == 0 {
				t.Fatalf("a host never called the periodic plugin: %+v", st)
			}
		}
	}
	if err := client.RemovePeriodic(ctx, "heartbeat"); err != nil {
		t.Fatal(err)
	}

	part := client.Partitions().SoloPartition("beats")
	pk := model.KeysOn(part)
	read := func() map[int64]model.ExecutionID {
		ids, err := raw.Do(ctx, raw.B().Smembers().Key(pk.AllExecutions()).Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		byTick := map[int64]model.ExecutionID{}
		for _, s := range ids {
			id := model.ExecutionID(s)
			tags, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeysFor(id).Tags()).Build()).AsStrMap()
			if err != nil {
				t.Fatal(err)
			}
			tick, err := strconv.ParseInt(tags[periodic.TagTick], 10, 64)
			if err != nil || tags[periodic.TagSchedule] != "heartbeat" || tags["app.team"] != "ops" {
				t.Fatalf("%s tags = %v", id, tags)
			}
			if prev, dup := byTick[tick]; dup {
				t.Fatalf("tick %d fired twice: %s and %s", tick, prev, id)
			}
			byTick[tick] = id
			if id != periodic.TickID(part, "heartbeat", tick) {
				t.Fatalf("tick %d execution %s is not the tick's id", tick, id)
			}
		}
		return byTick
	}
	byTick := read()
	if len(byTick) < ticks {
		t.Fatalf("%d executions for at least %d ticks", len(byTick), ticks)
	}
	got := slices.Sorted(func(yield func(int64) bool) {
		for k := range byTick {
			if !yield(k) {
				return
			}
		}
	})
	var worst int64
	for i, tick := range got {
		if want := first + int64(i)*every.Milliseconds(); tick != want {
			t.Fatalf("tick %d is %d, want %d (ticks %v)", i, tick, want, got)
		}
		created, err := raw.Do(ctx, raw.B().Hget().Key(model.KeysFor(byTick[tick]).Core()).Field("created_at").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, created-tick)
	}
	t.Logf("latest tick creation: %d ms after its tick", worst)
	core, err := c.ExecutionCore(ctx, byTick[got[0]])
	if err != nil {
		t.Fatal(err)
	}
	if core["execution_kind"] != "beat" || core["lane_id"] != "beats" || core["priority"] != "3" || core["creator_identity"] != "fabric-periodic" {
		t.Fatalf("fired execution core = %v", core)
	}
	// Removed: a few more scan rounds of both hosts create nothing (with
	// polling; on timers an idle partition is only polled every 10 s).
	if o.poll > 0 {
		calls := func() (n int64) {
			for _, h := range hosts {
				st, _ := h.Plugin("periodic")
				n += st.Calls
			}
			return n
		}
		after := calls()
		valkeytest.Eventually(t, time.Minute, "hosts scan on after the removal", func() bool {
			return calls() > after+int64(2*len(hosts)*4*2)
		})
		if n := len(read()); n != len(byTick) {
			t.Fatalf("%d executions after the removal, %d before", n, len(byTick))
		}
	}
	var acted uint32
	for _, h := range hosts {
		st, _ := h.Plugin("periodic")
		if st.Faults != 0 || st.Totals.Errors != 0 {
			t.Errorf("plugin status: %d faults, totals %+v", st.Faults, st.Totals)
		}
		acted += st.Totals.Acted
	}
	// Acted counts every create, DUPLICATE included: beyond the ticks,
	// they are the races the deterministic id settled.
	t.Logf("%d ticks fired once each; the two hosts issued %d creates", len(byTick), acted)
}
