package sdk_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestPeriodicStore: AddPeriodic writes the schedule on its lane's
// partition and indexes its first tick; adding the name again on another
// lane moves it; ListPeriodic and RemovePeriodic see the registry; bad
// schedules fail before the network. (The firing is host's
// TestPeriodicExactlyOncePerTickAcrossHosts.)
func TestPeriodicStore(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	raw := b.vc.Raw()
	before := time.Now()
	info, err := b.c.AddPeriodic(b.ctx, sdk.Periodic{Name: "nightly", Cron: "0 3 * * *", Kind: "report"}, sdk.WithLane("reports"))
	if err != nil {
		t.Fatal(err)
	}
	if info.NextDue.Before(before) || info.NextDue.UTC().Hour() != 3 || info.NextDue.Minute() != 0 {
		t.Fatalf("first tick %s", info.NextDue)
	}
	score := func(lane, name string) (float64, bool) {
		pk := model.KeysOn(b.c.Partitions().SoloPartition(lane))
		s, err := raw.Do(b.ctx, raw.B().Zscore().Key(pk.PeriodicIndex()).Member(name).Build()).AsFloat64()
		return s, err == nil
	}
	if s, ok := score("reports", "nightly"); !ok || int64(s) != info.NextDue.UnixMilli() {
		t.Fatalf("index score %v %v, want %d", s, ok, info.NextDue.UnixMilli())
	}
	if _, err := b.c.AddPeriodic(b.ctx, sdk.Periodic{Name: "tick", Every: time.Minute, Kind: "beat"}); err != nil {
		t.Fatal(err)
	}
	// Replace nightly on another lane: it leaves the first partition.
	if _, err := b.c.AddPeriodic(b.ctx, sdk.Periodic{Name: "nightly", Every: time.Hour, Kind: "report2"}, sdk.WithLane("other")); err != nil {
		t.Fatal(err)
	}
	if b.c.Partitions().SoloPartition("reports") != b.c.Partitions().SoloPartition("other") {
		if _, ok := score("reports", "nightly"); ok {
			t.Fatal("the replaced schedule is still indexed on its old lane's partition")
		}
	}
	l, err := b.c.ListPeriodic(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 2 || l[0].Name != "nightly" || l[0].Kind != "report2" || l[0].Lane != "other" || l[0].Every != time.Hour ||
		l[0].Cron != "" || l[1].Name != "tick" || l[1].Lane != sdk.DefaultLane || !l[1].LastTick.IsZero() {
		t.Fatalf("list = %+v", l)
	}
	if err := b.c.RemovePeriodic(b.ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if err := b.c.RemovePeriodic(b.ctx, "nightly"); !errors.Is(err, sdk.ErrPeriodicNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, ok := score("other", "nightly"); ok {
		t.Fatal("removed schedule still indexed")
	}
	if l, _ := b.c.ListPeriodic(b.ctx); len(l) != 1 || l[0].Name != "tick" {
		t.Fatalf("list after remove = %+v", l)
	}

	vc := valkeytest.Dial(t, valkeytest.Server(t).URL(), 0)
	closed, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	vc.Close()
	for name, c := range map[string]struct {
		p    sdk.Periodic
		opts []sdk.EnqueueOption
	}{
		"NoName":        {p: sdk.Periodic{Every: time.Minute, Kind: "k"}},
		"BadName":       {p: sdk.Periodic{Name: "a b", Every: time.Minute, Kind: "k"}},
		"NoTiming":      {p: sdk.Periodic{Name: "n", Kind: "k"}},
		"BothTimings":   {p: sdk.Periodic{Name: "n", Every: time.Minute, Cron: "* * * * *", Kind: "k"}},
		"TooFrequent":   {p: sdk.Periodic{Name: "n", Every: time.Millisecond, Kind: "k"}},
		"BadCron":       {p: sdk.Periodic{Name: "n", Cron: "every day", Kind: "k"}},
		"NeverFires":    {p: sdk.Periodic{Name: "n", Cron: "0 0 31 2 *", Kind: "k"}},
		"NoKind":        {p: sdk.Periodic{Name: "n", Every: time.Minute}},
		"BadOption":     {p: sdk.Periodic{Name: "n", Every: time.Minute, Kind: "k"}, opts: []sdk.EnqueueOption{sdk.WithPriority(-1)}},
		"DelayOption":   {p: sdk.Periodic{Name: "n", Every: time.Minute, Kind: "k"}, opts: []sdk.EnqueueOption{sdk.WithDelay(time.Second)}},
		"IdemKeyOption": {p: sdk.Periodic{Name: "n", Every: time.Minute, Kind: "k"}, opts: []sdk.EnqueueOption{sdk.WithIdempotencyKey("x")}},
	} {
		if _, err := closed.AddPeriodic(b.ctx, c.p, c.opts...); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
		}
	}
	if err := closed.RemovePeriodic(b.ctx, ""); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("remove empty name: %v", err)
	}
}

// TestPeriodicAdvanceFunction drives fabric_periodic_advance directly: it
// moves a schedule only from the tick it is at and only once the tick's
// execution exists, and drops the index entry of a removed schedule.
func TestPeriodicAdvanceFunction(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	if err := b.vc.EnsureFabricLibrary(b.ctx); err != nil {
		t.Fatal(err)
	}
	info, err := b.c.AddPeriodic(b.ctx, sdk.Periodic{Name: "adv", Every: time.Minute, Kind: "k"}, sdk.WithLane("adv"))
	if err != nil {
		t.Fatal(err)
	}
	part := b.c.Partitions().SoloPartition("adv")
	pk := model.KeysOn(part)
	tick := info.NextDue.UnixMilli()
	eid := periodic.TickID(part, "adv", tick)
	advance := func(name string, tick, next int64) (string, error) {
		e := periodic.TickID(part, name, tick)
		rep, err := b.vc.FCall(b.ctx, "fabric_periodic_advance",
			[]string{pk.PeriodicSchedule(name), pk.PeriodicIndex(), model.KeysFor(e).Core()},
			[]string{name, strconv.FormatInt(tick, 10), strconv.FormatInt(next, 10), string(e)})
		if err != nil {
			return "", err
		}
		return rep.Field(0), nil
	}
	// Before the tick's execution exists: refused, nothing moves.
	if _, err := advance("adv", tick, tick+60_000); valkey.CodeOf(err) != "not_created" {
		t.Fatalf("advance without the execution: %v", err)
	}
	if _, err := b.c.CreateExecution(b.ctx, sdk.ExecutionSpec{ID: eid, Lane: "adv"}); err != nil {
		t.Fatal(err)
	}
	if got, err := advance("adv", tick, tick+60_000); err != nil || got != "advanced" {
		t.Fatalf("advance = %q, %v", got, err)
	}
	// A second host with the same tick finds it moved on.
	if got, err := advance("adv", tick, tick+60_000); err != nil || got != "stale" {
		t.Fatalf("repeat = %q, %v", got, err)
	}
	l, _ := b.c.ListPeriodic(b.ctx)
	if len(l) != 1 || l[0].NextDue.UnixMilli() != tick+60_000 || l[0].LastTick.UnixMilli() != tick || l[0].LastExecutionID != eid {
		t.Fatalf("after advance: %+v", l)
	}
	score, err := b.vc.Raw().Do(b.ctx, b.vc.Raw().B().Zscore().Key(pk.PeriodicIndex()).Member("adv").Build()).AsFloat64()
	if err != nil || int64(score) != tick+60_000 {
		t.Fatalf("index score %v, %v", score, err)
	}
	// A stray index entry of a removed schedule is dropped.
	if err := b.vc.Raw().Do(b.ctx, b.vc.Raw().B().Zadd().Key(pk.PeriodicIndex()).ScoreMember().ScoreMember(1, "ghost").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := advance("ghost", 1, 2); err != nil || got != "gone" {
		t.Fatalf("ghost = %q, %v", got, err)
	}
	if err := b.vc.Raw().Do(b.ctx, b.vc.Raw().B().Zscore().Key(pk.PeriodicIndex()).Member("ghost").Build()).Error(); !vk.IsValkeyNil(err) {
		t.Fatalf("ghost still indexed: %v", err)
	}
}
