package host_test

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// stageLog is a StageObserver keeping every event.
type stageLog struct {
	mu  sync.Mutex
	evs []host.StageEvent
}

func (s *stageLog) SweepDone(host.SweepEvent) {}

func (s *stageLog) StageDone(ev host.StageEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, ev)
}

func (s *stageLog) events() []host.StageEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]host.StageEvent(nil), s.evs...)
}

// TestStageTimings: every delayed execution the promoter promotes on
// due-time timers comes with a StageEvent of its partition whose stage
// boundaries are in order (due ≤ taken ≤ call started ≤ FCALL sent ≤
// replies in), the first stage a timer's (the executions were created
// ahead of their due times).
func TestStageTimings(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 2*time.Minute)
	c := valkeytest.Client(t)
	dir := t.TempDir()
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(dir, "delayed_promoter.wasm"))
	obs := &stageLog{}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir, Backend: c, Observer: obs,
		Partitions: model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2},
		Plugins:    map[string]host.PluginConfig{"delayed_promoter": {Interval: time.Minute}},
		Logger:     valkeytest.Logger(),
		Leases:     partlease.Config{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	<-h.Started()
	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[int]bool{}
	var ids []model.ExecutionID
	for i := range 4 {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i)}, model.NewUUID())
		if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "default",
			ExecutionKind: "k", DelayUntil: now + 1500 + int64(i)*200}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		parts[i] = true
	}
	for _, id := range ids {
		valkeytest.Eventually(t, 30*time.Second, string(id)+" promoted", func() bool {
			core, err := c.ExecutionCore(ctx, id)
			return err == nil && core["eligibility_state"] == "eligible_now"
		})
	}
	// The events of a call are reported once it is done.
	valkeytest.Eventually(t, 30*time.Second, "an event per promoted partition", func() bool {
		seen := map[int]bool{}
		for _, ev := range obs.events() {
			seen[ev.Partition] = true
		}
		return len(seen) == len(parts)
	})
	for _, ev := range obs.events() {
		if ev.Plugin != "delayed_promoter" || !parts[ev.Partition] {
			t.Errorf("event of %s partition %d", ev.Plugin, ev.Partition)
		}
		bounds := []time.Time{ev.Due, ev.Taken, ev.CallStart, ev.FCallSent, ev.FCallDone}
		for i := 1; i < len(bounds); i++ {
			if bounds[i].Before(bounds[i-1]) {
				t.Errorf("partition %d: stage boundary %d (%s) before %d (%s)", ev.Partition, i, bounds[i], i-1, bounds[i-1])
			}
		}
		st := ev.Stages()
		if len(st) != 4 || st[0].Stage != host.StageTimer && st[0].Stage != host.StageWake || st[3].Stage != host.StageFCall {
			t.Errorf("stages %+v", st)
		}
		for _, s := range st {
			if s.Duration < 0 {
				t.Errorf("partition %d: stage %s took %s", ev.Partition, s.Stage, s.Duration)
			}
		}
	}
	timed := 0
	for _, ev := range obs.events() {
		if !ev.Woken {
			timed++
		}
	}
	if timed == 0 {
		t.Error("no promotion came from a timer: every one was a wake-up")
	}
}
