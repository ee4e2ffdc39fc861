package host

import "testing"

// TestRecordRing: the ring grows with what is added, never past max, and
// keeps the last max records oldest first.
func TestRecordRing(t *testing.T) {
	var idle recordRing
	idle.max = 100
	if got := idle.snapshot(); len(got) != 0 || cap(idle.buf) != 0 {
		t.Fatalf("idle ring: snapshot %d records, buffer cap %d; want 0, 0", len(got), cap(idle.buf))
	}
	for _, n := range []int{0, 1, 5, 99, 100, 101, 250, 1000} {
		r := recordRing{max: 100}
		for i := range n {
			r.add(CycleRecord{Cycle: uint64(i)})
		}
		got := r.snapshot()
		want := min(n, 100)
		if len(got) != want {
			t.Fatalf("n=%d: %d records, want %d", n, len(got), want)
		}
		for i, rec := range got {
			if w := uint64(n - want + i); rec.Cycle != w {
				t.Fatalf("n=%d: record %d is cycle %d, want %d", n, i, rec.Cycle, w)
			}
		}
		if cap(r.buf) > 100 {
			t.Fatalf("n=%d: buffer cap %d past max 100", n, cap(r.buf))
		}
	}
	var off recordRing
	off.add(CycleRecord{Cycle: 1})
	if len(off.snapshot()) != 0 {
		t.Fatal("a ring of max 0 kept a record")
	}
}
