package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// leaseHost is one host of a multi-host test: its own plugin directory,
// its own Valkey client (as a separate process would have) and a record
// of every partition call it made.
type leaseHost struct {
	id     string
	h      *host.Host
	client *valkey.Client
	sig    *host.TestSignals
	csig   *host.CompletionSignals

	mu        sync.Mutex
	records   []host.CycleRecord
	dispatch  []host.DispatchRecord
	collected chan struct{}
}

type leaseHostOpts struct {
	ttl         time.Duration
	fixtures    []string
	completions bool
	// perCall is Config.PartitionsPerCall (0: the default).
	perCall int
}

// startLeaseHost starts host id on the server at url.
func startLeaseHost(t *testing.T, url, id string, o leaseHostOpts) *leaseHost {
	t.Helper()
	dir := t.TempDir()
	for _, f := range o.fixtures {
		copyFile(t, fixture(t, f), filepath.Join(dir, f+".wasm"))
	}
	lh := &leaseHost{id: id, client: valkeytest.Dial(t, url, 0), sig: &host.TestSignals{}, collected: make(chan struct{})}
	lh.sig.Init()
	cfg := host.Config{
		PluginDir: dir,
		CacheDir:  cacheDir,
		Policy:    fixturePolicy(t),
		Backend:   lh.client,
		Logger:    valkeytest.Logger(),
		// bench's calls last a few milliseconds (50 server round trips):
		// hand-offs then often find a call in flight.
		Plugins: map[string]host.PluginConfig{
			"healthy": {Interval: 200 * time.Millisecond},
			"bench":   {Interval: 200 * time.Millisecond, BatchSize: 50},
			// 25 s (the fixture's timeout is 30 s): a join lands inside the slow call even on a
			// machine loaded by a whole -race suite (10 s was too tight in a wide run).
			"slowpart": {Config: map[string]string{"slow_ms": "25000"}},
		},
		Timers:            host.TimerConfig{Disabled: true},
		TestSignals:       lh.sig,
		Leases:            partlease.Config{HostID: id, TTL: o.ttl},
		PartitionsPerCall: o.perCall,
	}
	if o.completions {
		lh.csig = &host.CompletionSignals{}
		lh.csig.Init()
		cfg.Completions = host.CompletionConfig{Enabled: true, Signals: lh.csig}
	}
	h, err := host.New(cfg)
	if err != nil {
		t.Fatalf("host.New %s: %v", id, err)
	}
	lh.h = h
	// Collect every partition call and dispatch as it happens: the records
	// outlive the host (Records is empty once it stopped).
	stop := make(chan struct{})
	go func() {
		defer close(lh.collected)
		var dch <-chan host.DispatchRecord
		if lh.csig != nil {
			dch = lh.csig.Dispatched.C()
		}
		for {
			select {
			case r := <-lh.sig.PartitionDone.C():
				lh.mu.Lock()
				lh.records = append(lh.records, r)
				lh.mu.Unlock()
			case r := <-dch:
				lh.mu.Lock()
				lh.dispatch = append(lh.dispatch, r)
				lh.mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("Start %s: %v", id, err)
	}
	t.Cleanup(func() {
		h.Stop()
		h.Close(context.Background())
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-lh.collected
	})
	select {
	case <-h.Started():
	case <-time.After(60 * time.Second):
		t.Fatalf("host %s did not finish its initial load within 60s", id)
	}
	return lh
}

// calls returns a copy of the partition calls collected so far.
func (lh *leaseHost) calls() []host.CycleRecord {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	return slices.Clone(lh.records)
}

func (lh *leaseHost) owned() partlease.Status {
	st, _ := lh.h.Leases()
	return st
}

// owns reports whether the host holds exactly want (family → ranges) and
// is handing nothing off.
func (lh *leaseHost) owns(want map[string]string) bool {
	st := lh.owned()
	if len(st.Draining) > 0 {
		return false
	}
	for fam, r := range want {
		if st.Owned[fam] != r {
			return false
		}
	}
	return true
}

// sweptSince reports whether the host called every partition of flow
// range [lo, hi] after t.
func (lh *leaseHost) sweptSince(t time.Time, lo, hi int) bool {
	seen := map[int]bool{}
	for _, r := range lh.calls() {
		if r.Start.After(t) && r.Error == "" {
			seen[r.Partition] = true
		}
	}
	for i := lo; i <= hi; i++ {
		if !seen[i] {
			return false
		}
	}
	return true
}

// tableOwners reads the deployment's partition leases.
func tableOwners(t *testing.T, c *valkey.Client) partlease.Ownership {
	t.Helper()
	tbl, err := c.ReadPartitionLeases(valkeytest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return partlease.Summarize(tbl)
}

// assertExclusive checks the per-call records of every host: each call
// ran under a lease (host id and token), each token of a partition
// belongs to one host, and the calls under successive tokens of a
// partition never overlap in time: every call under token n ended before
// the first call under any later token began. It returns the number of
// hand-offs (successive tokens of different hosts) seen.
func assertExclusive(t *testing.T, hosts ...*leaseHost) int {
	t.Helper()
	type span struct {
		host       string
		start, end time.Time
		calls      int
	}
	byPart := map[int]map[int64]*span{}
	total := 0
	for _, lh := range hosts {
		for _, r := range lh.calls() {
			total++
			if r.Host != lh.id || r.Token <= 0 {
				t.Fatalf("call of %s on partition %d carries host %q token %d", lh.id, r.Partition, r.Host, r.Token)
			}
			if byPart[r.Partition] == nil {
				byPart[r.Partition] = map[int64]*span{}
			}
			s := byPart[r.Partition][r.Token]
			if s == nil {
				s = &span{host: r.Host, start: r.Start, end: r.End}
				byPart[r.Partition][r.Token] = s
			}
			if s.host != r.Host {
				t.Fatalf("partition %d token %d used by %s and %s", r.Partition, r.Token, s.host, r.Host)
			}
			if r.Start.Before(s.start) {
				s.start = r.Start
			}
			if r.End.After(s.end) {
				s.end = r.End
			}
			s.calls++
		}
	}
	handoffs := 0
	for part, tokens := range byPart {
		ts := make([]int64, 0, len(tokens))
		for tok := range tokens {
			ts = append(ts, tok)
		}
		slices.Sort(ts)
		for i := 1; i < len(ts); i++ {
			prev, cur := tokens[ts[i-1]], tokens[ts[i]]
			if prev.end.After(cur.start) {
				t.Fatalf("partition %d: calls under token %d (%s, %s..%s) overlap calls under token %d (%s, %s..%s)",
					part, ts[i-1], prev.host, prev.start.Format("15:04:05.000000"), prev.end.Format("15:04:05.000000"),
					ts[i], cur.host, cur.start.Format("15:04:05.000000"), cur.end.Format("15:04:05.000000"))
			}
			if prev.host != cur.host {
				handoffs++
			}
		}
	}
	t.Logf("%d partition calls on %d partitions by %d hosts: no overlap across %d hand-offs", total, len(byPart), len(hosts), handoffs)
	return handoffs
}

func startLeaseServer(t *testing.T) (string, *valkey.Client) {
	t.Helper()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	if _, err := c.EnsureLibrary(valkeytest.Context(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	return srv.URL(), c
}

// TestPartitionLeasesSplitJoinLeave: a lone host owns all 320 partitions
// from its start; a second host gets half (the first hands its half off
// at a batch boundary); a third joins and gets a third; the third stops
// gracefully and the other two take its partitions before its leases
// could have expired. Throughout, no partition is called by two hosts at
// once, asserted from every call's record.
func TestPartitionLeasesSplitJoinLeave(t *testing.T) {
	t.Parallel()
	url, c := startLeaseServer(t)
	// A long TTL: every hand-off here must come from a release, not an
	// expiry.
	opts := leaseHostOpts{ttl: 30 * time.Second, fixtures: []string{"healthy", "bench"}}
	a := startLeaseHost(t, url, "host-a", opts)
	if st := a.owned(); st.Count != 320 || st.Owned["flow"] != "0-255" {
		t.Fatalf("a lone host must own every partition once started: %+v", st)
	}
	valkeytest.Eventually(t, 60*time.Second, "host-a sweeps all 256 flow partitions", func() bool {
		return a.sweptSince(time.Time{}, 0, 255)
	})

	b := startLeaseHost(t, url, "host-b", opts)
	valkeytest.Eventually(t, 60*time.Second, "host-a and host-b split the partitions", func() bool {
		return a.owns(map[string]string{"flow": "0-127", "budget": "0-15", "quota": "0-15"}) &&
			b.owns(map[string]string{"flow": "128-255", "budget": "16-31", "quota": "16-31"})
	})
	split := time.Now()
	valkeytest.Eventually(t, 60*time.Second, "both hosts sweep their halves", func() bool {
		return a.sweptSince(split, 0, 127) && b.sweptSince(split, 128, 255)
	})
	for _, lh := range []*leaseHost{a, b} {
		lo, hi := 0, 127
		if lh == b {
			lo, hi = 128, 255
		}
		for _, r := range lh.calls() {
			if r.Start.After(split) && (r.Partition < lo || r.Partition > hi) {
				t.Fatalf("%s called partition %d after the split", lh.id, r.Partition)
			}
		}
	}
	own := tableOwners(t, c)
	if len(own.Hosts) != 2 || own.Free != 0 || own.Hosts[0].Partitions != 160 || own.Hosts[1].Ranges["flow"] != "128-255" {
		t.Fatalf("lease table after the split: %+v", own)
	}

	cHost := startLeaseHost(t, url, "host-c", opts)
	thirds := map[*leaseHost]map[string]string{
		a:     {"flow": "0-84", "budget": "0-9", "quota": "0-9"},
		b:     {"flow": "85-169", "budget": "10-20", "quota": "10-20"},
		cHost: {"flow": "170-255", "budget": "21-31", "quota": "21-31"},
	}
	valkeytest.Eventually(t, 60*time.Second, "three hosts share the partitions", func() bool {
		for lh, want := range thirds {
			if !lh.owns(want) {
				return false
			}
		}
		return true
	})
	joined := time.Now()
	valkeytest.Eventually(t, 60*time.Second, "host-c sweeps its share", func() bool {
		return cHost.sweptSince(joined, 170, 255)
	})

	// Graceful stop of host-c: its leases are released, so the others take
	// them long before the 30 s TTL would have freed them.
	var cExpiry int64
	tbl, err := c.ReadPartitionLeases(valkeytest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range tbl.Leases {
		if l.Owner == "host-c" && (cExpiry == 0 || l.ExpiresAtMs < cExpiry) {
			cExpiry = l.ExpiresAtMs
		}
	}
	stopped := time.Now()
	cHost.h.Stop()
	valkeytest.Eventually(t, 60*time.Second, "host-a and host-b take host-c's share", func() bool {
		return a.owns(map[string]string{"flow": "0-127"}) && b.owns(map[string]string{"flow": "128-255"})
	})
	taken := time.Since(stopped)
	now, err := c.ServerTime(valkeytest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if now >= cExpiry {
		t.Fatalf("the take-over after a graceful stop waited for the leases to expire (now %d, expiry %d)", now, cExpiry)
	}
	t.Logf("graceful stop: peers own host-c's partitions %s after Stop began (TTL 30s)", taken.Round(time.Millisecond))
	if own := tableOwners(t, c); len(own.Hosts) != 2 || own.Free != 0 {
		t.Fatalf("lease table after host-c left: %+v", own)
	}
	handed := time.Now()
	valkeytest.Eventually(t, 60*time.Second, "host-b sweeps the partitions it took from host-c", func() bool {
		return b.sweptSince(handed, 170, 255)
	})
	if n := assertExclusive(t, a, b, cHost); n < 128+85 {
		t.Fatalf("only %d hand-offs recorded; want at least the 128 of the split and the 85 of host-c's share", n)
	}
}

// TestPartitionLeasesTakeoverAfterKill: a host whose connections die
// without releasing anything (kill -9) keeps its partitions only until
// its leases expire; the survivor then owns all of them, under higher
// tokens, and no partition was ever called by both.
func TestPartitionLeasesTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	url, c := startLeaseServer(t)
	const ttl = 2 * time.Second
	opts := leaseHostOpts{ttl: ttl, fixtures: []string{"healthy", "bench"}}
	a := startLeaseHost(t, url, "host-a", opts)
	valkeytest.Eventually(t, 60*time.Second, "host-a sweeps all 256 flow partitions", func() bool {
		return a.sweptSince(time.Time{}, 0, 255)
	})
	b := startLeaseHost(t, url, "host-b", opts)
	valkeytest.Eventually(t, 60*time.Second, "the hosts split the partitions", func() bool {
		return a.owns(map[string]string{"flow": "0-127"}) && b.owns(map[string]string{"flow": "128-255"})
	})
	split := time.Now()
	valkeytest.Eventually(t, 60*time.Second, "host-a sweeps its half", func() bool { return a.sweptSince(split, 0, 127) })

	// kill -9: the process's connections drop, nothing is released.
	a.client.Close()
	killed := time.Now()
	a.h.Stop()
	valkeytest.Eventually(t, 60*time.Second, "host-b owns every partition", func() bool {
		return b.owned().Count == 320
	})
	takeover := time.Since(killed)
	t.Logf("takeover after kill: host-b owns all 320 partitions %s after host-a died (lease TTL %s)", takeover.Round(time.Millisecond), ttl)
	tbl, err := c.ReadPartitionLeases(valkeytest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range tbl.Leases {
		if l.Owner != "host-b" || l.Token != 2 {
			t.Fatalf("%s: owner %q token %d, want host-b under token 2", l.Partition, l.Owner, l.Token)
		}
	}
	if len(tbl.Members) != 1 || tbl.Members[0].ID != "host-b" {
		t.Fatalf("members %+v", tbl.Members)
	}
	took := time.Now()
	valkeytest.Eventually(t, 60*time.Second, "host-b sweeps host-a's former half", func() bool { return b.sweptSince(took, 0, 127) })
	if n := assertExclusive(t, a, b); n < 256 {
		t.Fatalf("%d hand-offs recorded; want the 128 of the split and the 128 of the takeover", n)
	}
}

// TestPartitionLeasesCompletionsByOwner: every host receives every
// completion; only the owner of the completion's flow partition
// dispatches it.
func TestPartitionLeasesCompletionsByOwner(t *testing.T) {
	t.Parallel()
	url, c := startLeaseServer(t)
	opts := leaseHostOpts{ttl: 30 * time.Second, fixtures: []string{"dependency"}, completions: true}
	a := startLeaseHost(t, url, "host-a", opts)
	b := startLeaseHost(t, url, "host-b", opts)
	valkeytest.Eventually(t, 60*time.Second, "the hosts split the partitions", func() bool {
		return a.owns(map[string]string{"flow": "0-127"}) && b.owns(map[string]string{"flow": "128-255"})
	})
	a.csig.Subscribed.WaitOrTimeout(t)
	b.csig.Subscribed.WaitOrTimeout(t)

	parts := c.Partitions()
	const n = 64
	wantA := 0
	ctx := valkeytest.Context(t, 30*time.Second)
	for range n {
		flow := model.NewUUID()
		p := parts.FlowPartition(flow)
		if p.Index < 128 {
			wantA++
		}
		msg, _ := json.Marshal(abi.Completion{ExecutionID: string(model.NewExecutionID(p, model.NewUUID())), FlowID: flow.String(), Outcome: "success"})
		raw := c.Raw()
		if err := raw.Do(ctx, raw.B().Publish().Channel(abi.CompletionsChannel).Message(string(msg)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	dispatched := func(lh *leaseHost) int {
		lh.mu.Lock()
		defer lh.mu.Unlock()
		sum := 0
		for _, r := range lh.dispatch {
			if r.Host != lh.id {
				t.Errorf("dispatch record of %s says host %q", lh.id, r.Host)
			}
			sum += r.Completions
		}
		return sum
	}
	valkeytest.Eventually(t, 60*time.Second, fmt.Sprintf("the %d completions are dispatched", n), func() bool {
		return dispatched(a)+dispatched(b) >= n
	})
	if got := dispatched(a); got != wantA {
		t.Fatalf("host-a dispatched %d completions, want the %d of its flow partitions", got, wantA)
	}
	if got := dispatched(b); got != n-wantA {
		t.Fatalf("host-b dispatched %d completions, want the %d of its flow partitions", got, n-wantA)
	}
}

// TestPartitionLeasesHandOffWaitsForCallInFlight: a host joins while the
// first host is in a 10 s call on a partition of the joiner's share. That
// partition is handed off at the call boundary: the joiner gets it only
// after the call ended, while the rest of its share comes at once. One
// partition per call, so the records show which call is in flight (with
// fabric_scan_batch every partition of the chunk waits the same way).
func TestPartitionLeasesHandOffWaitsForCallInFlight(t *testing.T) {
	t.Parallel()
	url, _ := startLeaseServer(t)
	const slow = 200
	opts := leaseHostOpts{ttl: 30 * time.Second, fixtures: []string{"slowpart"}, perCall: 1}
	a := startLeaseHost(t, url, "host-a", opts)
	last := func(lh *leaseHost) (host.CycleRecord, bool) {
		cs := lh.calls()
		if len(cs) == 0 {
			return host.CycleRecord{}, false
		}
		return cs[len(cs)-1], true
	}
	// host-a's latest call is on the partition before the slow one: it is
	// now in the slow call.
	valkeytest.Eventually(t, 60*time.Second, "host-a enters its slow call", func() bool {
		r, ok := last(a)
		return ok && r.Partition == slow-1
	})
	b := startLeaseHost(t, url, "host-b", opts)
	joined := time.Now()
	valkeytest.Eventually(t, 60*time.Second, "host-b holds its share but the slow partition", func() bool {
		st := b.owned()
		return st.Owned["flow"] == fmt.Sprintf("128-%d,%d-255", slow-1, slow+1)
	})
	if st := a.owned(); st.Draining["flow"] != fmt.Sprint(slow) {
		t.Fatalf("host-a must hold partition %d draining while its call runs: %+v", slow, st)
	}
	valkeytest.Eventually(t, 60*time.Second, "host-b gets the slow partition once the call ended", func() bool {
		return b.owns(map[string]string{"flow": "128-255"})
	})
	valkeytest.Eventually(t, 60*time.Second, "host-b calls the slow partition", func() bool {
		for _, r := range b.calls() {
			if r.Partition == slow {
				return true
			}
		}
		return false
	})
	var inFlight *host.CycleRecord
	for _, r := range a.calls() {
		if r.Partition == slow && r.Start.Before(joined) && r.End.After(joined) {
			inFlight = &r
		}
	}
	if inFlight == nil {
		t.Fatal("host-a's slow call was not in flight when host-b joined; the test proved nothing")
	}
	for _, r := range b.calls() {
		if r.Partition == slow && r.Start.Before(inFlight.End) {
			t.Fatalf("host-b called partition %d at %s, before host-a's call ended at %s", slow, r.Start, inFlight.End)
		}
	}
	assertExclusive(t, a, b)
}
