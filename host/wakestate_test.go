package host

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// take hands out each wake-up once: nothing (nil) when none arrived, the
// first arrival per partition, the keys of a partition woken by keys
// alone, and a wake of every partition for all of them.
func TestWakeStateTake(t *testing.T) {
	t.Parallel()
	w := newWakeState(abi.Manifest{Config: map[string]string{abi.ConfigWake: "ff:idx:*:delayed"}})
	if out, keys := w.take(4); out != nil || keys != nil {
		t.Fatalf("take with nothing woken = %v, %v; want nil", out, keys)
	}
	t0 := time.Unix(1000, 0)
	w.wake(2, "ff:idx:{fp:2}:delayed", t0)
	w.wake(2, "ff:idx:{fp:2}:delayed", t0.Add(time.Second)) // not the first: kept at t0
	w.wake(1, "", t0.Add(2*time.Second))                    // blind: no keys entry
	out, keys := w.take(4)
	if len(out) != 4 || !out[2].Equal(t0) || !out[1].Equal(t0.Add(2*time.Second)) || !out[0].IsZero() || !out[3].IsZero() {
		t.Fatalf("take = %v", out)
	}
	if len(keys) != 1 || len(keys[2]) != 1 || keys[2][0] != "ff:idx:{fp:2}:delayed" {
		t.Fatalf("keys = %v", keys)
	}
	if out, keys := w.take(4); out != nil || keys != nil {
		t.Fatalf("second take = %v, %v; want nil", out, keys)
	}
	w.wake(-1, "", t0)
	out, keys = w.take(3)
	if len(out) != 3 || !out[0].Equal(t0) || !out[2].Equal(t0) || len(keys) != 0 {
		t.Fatalf("take after a wake of all = %v, %v", out, keys)
	}
}
