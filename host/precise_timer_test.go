package host

import (
	"testing"
	"time"
)

// preciseAfter never fires early, on either path (the OS sleep alone for
// a short wait, a runtime timer then the OS sleep for a longer one), and
// a wait released before its time never receives.
func TestPreciseAfter(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{300 * time.Microsecond, preciseMargin, 3*preciseMargin + 700*time.Microsecond} {
		start := time.Now()
		ch, stop := preciseAfter(d)
		at := <-ch
		stop()
		if got := at.Sub(start); got < d {
			t.Fatalf("a wait of %s fired after %s", d, got)
		}
	}
	released, stop := preciseAfter(200 * time.Millisecond)
	stop()
	later, _ := preciseAfter(300 * time.Millisecond)
	<-later
	select {
	case at := <-released:
		t.Fatalf("a released wait fired at %s", at)
	default:
	}
}
