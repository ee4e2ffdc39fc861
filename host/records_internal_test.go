package host

import (
	"reflect"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
)

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

// TestRecordRingKeepsEveryField: a record comes back from the ring as it
// went in, across a change of version (its identity is shared by the
// records of one version only).
func TestRecordRingKeepsEveryField(t *testing.T) {
	r := recordRing{max: 3}
	at := time.Date(2026, 11, 27, 22, 0, 0, 5, time.UTC)
	mk := func(version string, cycle uint64) CycleRecord {
		return CycleRecord{Plugin: "p", Version: version, SHA256: "sha-" + version, Partition: int(cycle) % 7, Cycle: cycle,
			Start: at.Add(time.Duration(cycle) * time.Second), End: at.Add(time.Duration(cycle)*time.Second + time.Millisecond),
			Result: abi.ScanResult{Scanned: uint32(cycle), Acted: 1, Skipped: 2, Errors: 3, NextDueMs: int64(cycle) * 10},
			Error:  "e" + version, Host: "h", Token: int64(cycle) + 100, Wait: time.Duration(cycle), Probation: cycle%2 == 1}
	}
	want := []CycleRecord{mk("1", 1), mk("1", 2), mk("2", 3), mk("2", 4)}
	for _, rec := range want {
		r.add(rec)
	}
	if got := r.snapshot(); !reflect.DeepEqual(got, want[1:]) {
		t.Fatalf("snapshot:\n got %+v\nwant %+v", got, want[1:])
	}
	if r.buf[0].id != r.buf[2].id || r.buf[0].id == r.buf[1].id { // cycles 4, 2, 3
		t.Fatal("records of one version do not share their identity, or two versions share one")
	}
}
