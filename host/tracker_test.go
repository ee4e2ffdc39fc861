package host_test

import (
	"testing"

	"github.com/fabric-host/fabric/host"
)

func TestFailureTracker(t *testing.T) {
	t.Parallel()

	t.Run("SkipsForTenCyclesAfterThreeFailures", func(t *testing.T) {
		t.Parallel()
		var backoffs int
		tr := host.NewFailureTracker(func(string, int) { backoffs++ })
		tr.AdvanceCycle() // cycle 1
		for range 2 {
			tr.RecordFailure("e")
		}
		if tr.ShouldSkip("e") {
			t.Fatal("skipped after 2 failures")
		}
		tr.RecordFailure("e") // 3rd: skip until cycle 11
		if backoffs != 1 || !tr.ShouldSkip("e") {
			t.Fatalf("backoffs = %d, skip = %v", backoffs, tr.ShouldSkip("e"))
		}
		for range 9 {
			tr.AdvanceCycle() // up to cycle 10
		}
		if !tr.ShouldSkip("e") {
			t.Fatal("backoff ended before 10 cycles")
		}
		tr.AdvanceCycle() // cycle 11: one more chance, state reset
		if tr.ShouldSkip("e") {
			t.Fatal("still skipped after 10 cycles")
		}
		tr.RecordFailure("e")
		if tr.ShouldSkip("e") {
			t.Fatal("a single failure after the reset must not skip")
		}
	})

	t.Run("SuccessForgets", func(t *testing.T) {
		t.Parallel()
		tr := host.NewFailureTracker(nil)
		tr.RecordFailure("e")
		tr.RecordFailure("e")
		tr.RecordSuccess("e")
		tr.RecordFailure("e")
		if tr.ShouldSkip("e") || tr.Len() != 1 {
			t.Fatalf("skip = %v, len = %d", tr.ShouldSkip("e"), tr.Len())
		}
	})

	t.Run("GCKeepsOnlyBackoffs", func(t *testing.T) {
		t.Parallel()
		tr := host.NewFailureTracker(nil)
		for i := range 600 {
			tr.RecordFailure(string(rune('a'+i%26)) + string(rune(i)))
		}
		for range 3 {
			tr.RecordFailure("stuck")
		}
		for range 50 {
			tr.AdvanceCycle()
		}
		if tr.Len() != 0 {
			// "stuck" entered backoff at cycle 0 until 10, so by 50 it expired too.
			t.Fatalf("len = %d after GC, want 0", tr.Len())
		}
	})
}
