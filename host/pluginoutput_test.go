package host_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/host"
)

// waitCalls waits for n partition calls of plugin name and returns the
// last one's record.
func waitCalls(t *testing.T, b *testBundle, name string, n int) host.CycleRecord {
	t.Helper()
	var last host.CycleRecord
	// Not WaitOrTimeout: a flooding call under -race takes longer.
	timeout := time.After(2 * time.Minute)
	for n > 0 {
		select {
		case r := <-b.sig.PartitionDone.C():
			if r.Plugin == name {
				last = r
				n--
			}
		case <-timeout:
			t.Fatalf("%s: %d partition calls still to come after 2 minutes", name, n)
		}
	}
	return last
}

// TestReadBatchKeysPastGrantRefused: the readleak fixture, granted
// ff:idx:*:lane:*:eligible, asks through EXISTS's second key for the
// partition's waitpoint secrets and through SORT_RO GET/BY patterns for
// keys outside its grant or off its partition: against a real server,
// every one is refused and nothing leaks (before, EXISTS answered for
// the secrets key and the pattern whose tag the element picks ran).
func TestReadBatchKeysPastGrantRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"readleak"}, store: true})
	waitCalls(t, b, "readleak", 4)
	st, _ := b.host.Plugin("readleak")
	if st.Metrics["leaked"] != 0 || b.logs.Contains("was not refused") {
		t.Fatalf("reads past the grant were served: leaked %v; %s", st.Metrics["leaked"], b.logs.Grep(5, "was not refused"))
	}
	// Four refusals a call: two denied (EXISTS, the secrets pattern), the
	// BY pattern denied, the pattern off the key's tag a bad request.
	if st.Totals.Errors < 4*4 || st.Denied < 3*4 || st.State != host.StateRunning {
		t.Fatalf("state %s, errors %d, denied %d (last %q); want every read refused and the plugin running", st.State, st.Totals.Errors, st.Denied, st.LastDenial)
	}
}

// logBytes is the size of the log lines of plugin name.
func (l *logBuffer) logBytes(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.SplitAfter(l.b.String(), "\n") {
		if strings.Contains(line, "plugin="+name+" ") {
			n += len(line)
		}
	}
	return n
}

// TestLogFloodBudget: a plugin logging 4 KiB lines at full speed writes
// at most its log budget (the burst, then the rate) to the host's log in
// a measured window, and the host notes what it dropped.
func TestLogFloodBudget(t *testing.T) {
	t.Parallel()
	const lines = 5000 // a call: 20 MiB attempted
	policy := fixturePolicy(t)
	g := policy.Plugins["logflood"]
	g.HostCallsPerSecond = -1 // the log budget is what is tested
	policy.Plugins["logflood"] = g
	b := setup(t, setupOpts{fixtures: []string{"logflood"}, policy: policy,
		plugins: map[string]host.PluginConfig{"logflood": {Config: map[string]string{"lines": strconv.Itoa(lines)}}}})
	first := waitCalls(t, b, "logflood", 1)
	from, start := b.logs.logBytes("logflood"), first.End
	last, calls := first, 0
	for last.End.Sub(start) < 3*time.Second {
		last = waitCalls(t, b, "logflood", 1)
		calls++
	}
	window := last.End.Sub(start)
	written := b.logs.logBytes("logflood") - from
	attempted := calls * lines * 4092
	// Budget: DefaultLogBytesPerSecond over the window, plus the burst it
	// may have saved during a pause, plus the notes of drops.
	budget := int(window.Seconds()*32768) + 256<<10 + 4096
	t.Logf("logflood in %s (%d calls): %d bytes attempted, %d bytes written to the log (budget %d)",
		window.Round(time.Millisecond), calls, attempted, written, budget)
	if written > budget {
		t.Fatalf("%d bytes of logflood's lines written in %s, above its budget of %d", written, window, budget)
	}
	if !b.logs.Contains("plugin log lines dropped") {
		t.Fatal("the drops were not noted")
	}
}
