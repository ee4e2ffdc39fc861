package periodic

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/model"
)

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestTiming(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		every  time.Duration
		cron   string
		after  int64
		want   int64
		anchor int64
	}{
		{"EveryFromAnchor", 200 * time.Millisecond, "", 1_000, 1_150, 950},
		{"EveryOnATickIsStrictlyAfter", 200 * time.Millisecond, "", 1_150, 1_350, 950},
		{"EveryBeforeAnchor", time.Second, "", 10, 5_000, 5_000},
		{"CronEveryFiveMinutes", 0, "*/5 * * * *", ms("2026-01-01T10:02:00Z"), ms("2026-01-01T10:05:00Z"), 0},
		{"CronIsUTC", 0, "30 9 * * 1", ms("2026-01-01T00:00:00Z"), ms("2026-01-05T09:30:00Z"), 0},
		{"Descriptor", 0, "@hourly", ms("2026-01-01T10:02:00Z"), ms("2026-01-01T11:00:00Z"), 0},
		{"NeverFires", 0, "0 0 30 2 *", ms("2026-01-01T00:00:00Z"), 0, 0},
	}
	for _, c := range cases {
		tm, err := ParseTiming(c.every, c.anchor, c.cron)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := tm.Next(c.after); got != c.want {
			t.Errorf("%s: Next(%d) = %d, want %d", c.name, c.after, got, c.want)
		}
	}
	for name, bad := range map[string]struct {
		every time.Duration
		cron  string
	}{
		"Neither": {}, "Both": {time.Second, "* * * * *"}, "TooShort": {time.Millisecond, ""},
		"SubMillisecond": {time.Second + time.Microsecond, ""}, "BadCron": {0, "61 * * * *"},
		"SixFields": {0, "0 * * * * *"}, "TimeZone": {0, "CRON_TZ=Europe/Paris 0 * * * *"},
	} {
		if _, err := ParseTiming(bad.every, 0, bad.cron); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestAfterCatchesUpThenSkips(t *testing.T) {
	t.Parallel()
	tm, _ := ParseTiming(time.Second, 0, "")
	if got := tm.After(10_000, 30_000); got != 11_000 {
		t.Fatalf("20 s late: After = %d, want the next tick 11000", got)
	}
	now := int64(10_000 + 2*CatchUp.Milliseconds())
	if got := tm.After(10_000, now); got != now+1_000 {
		t.Fatalf("two catch-up windows late: After = %d, want the first tick after now %d", got, now+1_000)
	}
}

func TestTickIDIsDeterministic(t *testing.T) {
	t.Parallel()
	p := model.Partition{Family: model.FamilyFlow, Index: 3}
	a := TickID(p, "s", 1000)
	if a != TickID(p, "s", 1000) {
		t.Fatal("same tick, different ids")
	}
	if a == TickID(p, "s", 1001) || a == TickID(p, "t", 1000) {
		t.Fatal("different ticks share an id")
	}
	id, err := model.ParseExecutionID(string(a))
	if err != nil || id.Partition() != p {
		t.Fatalf("tick id %s: %v", a, err)
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "nightly.report", "team:ops-1_x"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "has space", "a{b}", string(make([]byte, NameMaxBytes+1))} {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q accepted", bad)
		}
	}
}
