package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestRateLineFits: the workload's progress line, behind the live view's
// "workload" label, fits a 160-column terminal even for a long, large,
// fast run (it took 185 columns for an ordinary one before).
func TestRateLineFits(t *testing.T) {
	for _, c := range []struct {
		elapsed time.Duration
		rate    float64
		n       int64
	}{
		{65 * time.Second, 100, 123_456},
		{99_999 * time.Second, 99_999, 999_999_999},
		{2 * time.Hour, 5000, 36_000_000},
	} {
		totals := []int64{c.n, c.n, c.n, c.n, c.n, c.n, c.n, c.n}
		for _, phase := range []string{"run  ", "drain"} {
			l := "workload    " + rateLine(phase, c.elapsed, c.rate, c.rate, totals)
			if n := utf8.RuneCountInString(l); n > 160 {
				t.Errorf("%d columns, want at most 160:\n%s", n, l)
			}
			if !strings.HasPrefix(l, "workload    "+phase+" ") || !strings.Contains(l, "/s completed") || !strings.Contains(l, "pending ") {
				t.Errorf("line lacks its phase or totals: %s", l)
			}
		}
	}
	for n, want := range map[int64]string{0: "0", 9_999: "9999", 10_000: "10k", 123_456: "123k", 999_499: "999k", 999_500: "1.0M",
		1_234_567: "1.2M", 9_960_000: "10M", 12_345_678: "12M", 345_678_901: "346M", 999_999_999: "1.0G"} {
		if got := shortCount(n); got != want {
			t.Errorf("shortCount(%d) = %q, want %q", n, got, want)
		}
	}
}
