package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
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
