package admin_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
)

// TestStageHistograms: each stage of a StageEvent is one observation of
// fabric_timer_stage_seconds under its plugin and stage, in seconds.
func TestStageHistograms(t *testing.T) {
	t.Parallel()
	m := admin.NewMetrics()
	var _ host.StageObserver = m
	due := time.Unix(1000, 0)
	ev := host.StageEvent{Plugin: "delayed_promoter", Partition: 3, Due: due,
		Taken: due.Add(2 * time.Millisecond), CallStart: due.Add(3 * time.Millisecond),
		FCallSent: due.Add(5 * time.Millisecond), FCallDone: due.Add(6 * time.Millisecond)}
	m.StageDone(ev)
	m.StageDone(ev)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{} // stage → count, sum
	for _, f := range fams {
		if f.GetName() != "fabric_timer_stage_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["plugin"] != "delayed_promoter" {
				t.Errorf("labels %v", labels)
			}
			got[labels["stage"]] = [2]float64{float64(mt.GetHistogram().GetSampleCount()), mt.GetHistogram().GetSampleSum()}
		}
	}
	want := map[string]float64{host.StageTimer: 0.002, host.StageQueue: 0.001, host.StageCall: 0.002, host.StageFCall: 0.001}
	if len(got) != len(want) {
		t.Fatalf("stages %v, want %v", got, want)
	}
	for st, d := range want {
		if g := got[st]; g[0] != 2 || g[1] < 2*d-1e-9 || g[1] > 2*d+1e-9 {
			t.Errorf("stage %s: count %v sum %v, want 2 and %v", st, g[0], g[1], 2*d)
		}
	}
}

// TestDispatchStageHistograms: each stage of a DispatchRecord is one
// observation of fabric_dispatch_stage_seconds under its plugin and stage.
func TestDispatchStageHistograms(t *testing.T) {
	t.Parallel()
	m := admin.NewMetrics()
	var _ host.DispatchObserver = m
	at := time.Unix(1000, 0)
	rec := host.DispatchRecord{Plugin: "dependency", Received: at, Start: at.Add(time.Millisecond),
		FCallSent: at.Add(3 * time.Millisecond), FCallDone: at.Add(4 * time.Millisecond), End: at.Add(6 * time.Millisecond)}
	m.DispatchDone(rec)
	m.DispatchDone(host.DispatchRecord{Plugin: "dependency", Start: at, End: at.Add(time.Millisecond)}) // sent no FCALL: not observed
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{} // stage → count, sum
	for _, f := range fams {
		if f.GetName() != "fabric_dispatch_stage_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["plugin"] != "dependency" {
				t.Errorf("labels %v", labels)
			}
			got[labels["stage"]] = [2]float64{float64(mt.GetHistogram().GetSampleCount()), mt.GetHistogram().GetSampleSum()}
		}
	}
	want := map[string]float64{host.StageHandOff: 0.001, host.StageCall: 0.002, host.StageFCall: 0.001, host.StageReturn: 0.002}
	if len(got) != len(want) {
		t.Fatalf("stages %v, want %v", got, want)
	}
	for st, d := range want {
		if g := got[st]; g[0] != 1 || g[1] < d-1e-9 || g[1] > d+1e-9 {
			t.Errorf("stage %s: count %v sum %v, want 1 and %v", st, g[0], g[1], d)
		}
	}
}
