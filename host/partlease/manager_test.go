package partlease_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// small is the partition config of these tests: FlowFabric's defaults,
// 256+32+32 partitions.
var small = model.DefaultPartitionConfig()

const total = 320

// fakeClock is a settable local clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newManager(t *testing.T, c *valkey.Client, id string, ttl time.Duration, o partlease.Options) *partlease.Manager {
	t.Helper()
	if o.Logger == nil {
		o.Logger = valkeytest.Logger()
	}
	m, err := partlease.New(partlease.Config{HostID: id, TTL: ttl}, c, small, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func step(t *testing.T, ctx context.Context, m *partlease.Manager) partlease.StepResult {
	t.Helper()
	res, err := m.RunOnce(ctx)
	if err != nil {
		t.Fatalf("%s step: %v", m.HostID(), err)
	}
	return res
}

func flow(i int) model.Partition { return model.Partition{Family: model.FamilyFlow, Index: uint16(i)} }

// holders reads the deployment's leases: partition → owner.
func holders(t *testing.T, ctx context.Context, c *valkey.Client) map[model.Partition]valkey.PartitionLease {
	t.Helper()
	tbl, err := c.ReadPartitionLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[model.Partition]valkey.PartitionLease{}
	for _, l := range tbl.Leases {
		out[l.Partition] = l
	}
	return out
}

func countOwned(hs map[model.Partition]valkey.PartitionLease, host string) int {
	n := 0
	for _, l := range hs {
		if l.Owner == host {
			n++
		}
	}
	return n
}

// A lone host owns every partition after its first step and can call on
// each of them.
func TestLoneHostOwnsEverything(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	m := newManager(t, c, "solo", 10*time.Second, partlease.Options{})
	res := step(t, ctx, m)
	if res.Acquired != total || res.Owned != total || res.Share != total || res.Pending != 0 || len(res.Members) != 1 {
		t.Fatalf("first step: %+v", res)
	}
	st := m.Status()
	if st.Owned["flow"] != "0-255" || st.Owned["budget"] != "0-31" || st.Owned["quota"] != "0-31" || st.Count != total {
		t.Fatalf("status: %+v", st)
	}
	g, ok := m.Begin(flow(3), 30*time.Second)
	if !ok || g.Token != 1 || g.Host != "solo" {
		t.Fatalf("begin: %+v %v", g, ok)
	}
	// A 30 s timeout is capped at the lease: TTL minus the 1 s margin.
	if left := time.Until(g.Deadline); left > 9*time.Second || left < 5*time.Second {
		t.Fatalf("deadline %s away", left)
	}
	g.End()
	if res := step(t, ctx, m); res.Renewed != total || res.Acquired != 0 {
		t.Fatalf("second step: %+v", res)
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if hs := holders(t, ctx, c); countOwned(hs, "solo") != 0 {
		t.Fatalf("leases left after Leave: %d", countOwned(hs, "solo"))
	}
}

// Two hosts split the partitions: the newcomer waits while the first
// host holds its share, the first host releases it at its next step (a
// call in flight delays the release of that partition until it ends), and
// the tokens of the moved partitions grow.
func TestJoinHandsOffAtBatchBoundary(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	a := newManager(t, c, "a", 10*time.Second, partlease.Options{})
	b := newManager(t, c, "b", 10*time.Second, partlease.Options{})
	step(t, ctx, a)
	inflight, ok := a.Begin(flow(200), time.Second) // in b's share once b joins
	if !ok {
		t.Fatal("a cannot begin on a partition it owns")
	}
	res := step(t, ctx, b)
	if res.Share != total/2 || res.Pending != total/2 || res.Acquired != 0 {
		t.Fatalf("b's first step: %+v", res)
	}
	res = step(t, ctx, a)
	if res.Released != total/2-1 || res.Draining != 1 || res.Owned != total/2+1 {
		t.Fatalf("a's step after b joined: %+v", res)
	}
	if _, ok := a.Begin(flow(200), time.Second); ok {
		t.Fatal("a began a new call on a draining partition")
	}
	if _, ok := a.Begin(flow(201), time.Second); ok {
		t.Fatal("a began a call on a released partition")
	}
	res = step(t, ctx, b)
	if res.Acquired != total/2-1 || res.Pending != 1 {
		t.Fatalf("b's step after the release: %+v", res)
	}
	inflight.End()
	step(t, ctx, a)
	res = step(t, ctx, b)
	if res.Acquired != 1 || res.Owned != total/2 || res.Pending != 0 {
		t.Fatalf("b's step after the last call ended: %+v", res)
	}
	hs := holders(t, ctx, c)
	for p, l := range hs {
		want, token := "a", int64(1)
		if int(p.Index) >= int(small.Count(p.Family))/2 {
			want, token = "b", 2
		}
		if l.Owner != want || l.Token != token {
			t.Fatalf("%s: owner %q token %d, want %q token %d", p, l.Owner, l.Token, want, token)
		}
	}
	if st := b.Status(); st.Owned["flow"] != "128-255" || st.Owned["budget"] != "16-31" {
		t.Fatalf("b status %+v", st)
	}
	own := partlease.Summarize(mustTable(t, ctx, c))
	if len(own.Hosts) != 2 || own.Hosts[0].Ranges["flow"] != "0-127" || own.Hosts[1].Ranges["quota"] != "16-31" || own.Free != 0 || !own.Hosts[1].Live {
		t.Fatalf("ownership %+v", own)
	}

	// a leaves gracefully: b owns everything at its next step.
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if res := step(t, ctx, b); res.Owned != total || res.Acquired != total/2 || len(res.Members) != 1 {
		t.Fatalf("b after a left: %+v", res)
	}
	for p, l := range holders(t, ctx, c) {
		if int(p.Index) < int(small.Count(p.Family))/2 && l.Token != 2 {
			t.Fatalf("%s token %d after the second hand-off, want 2", p, l.Token)
		}
	}
}

// A host that stops stepping (killed) loses its leases after the TTL: the
// survivor's Run takes them over on its own, with higher tokens.
func TestSurvivorTakesOverAfterTTL(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	const ttl = 500 * time.Millisecond
	dead := newManager(t, c, "a-dead", ttl, partlease.Options{})
	survivor := newManager(t, c, "b-survivor", ttl, partlease.Options{})
	step(t, ctx, dead)
	step(t, ctx, survivor)
	step(t, ctx, dead)
	killed := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); survivor.Run(rctx) }()
	defer func() { cancel(); <-done }()
	valkeytest.Eventually(t, 30*time.Second, "the survivor owns every partition", func() bool {
		return survivor.Status().Count == total
	})
	t.Logf("takeover %s after the last step of the dead host (TTL %s)", time.Since(killed).Round(time.Millisecond), ttl)
	for p, l := range holders(t, ctx, c) {
		if l.Owner != "b-survivor" {
			t.Fatalf("%s held by %q", p, l.Owner)
		}
		if int(p.Index) < int(small.Count(p.Family))/2 && l.Token != 2 {
			t.Fatalf("%s token %d, want 2 (taken over from the dead host)", p, l.Token)
		}
	}
}

// Begin refuses a call once the lease's local expiry is too close (the
// host could not renew), and a step after the local expiry drops it.
func TestBeginNeedsRoomOnTheLease(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	clock := &fakeClock{t: time.Now()}
	m := newManager(t, c, "h", 10*time.Second, partlease.Options{Clock: clock.Now})
	step(t, ctx, m)
	if _, ok := m.Begin(flow(0), 2*time.Second); !ok {
		t.Fatal("fresh lease refused")
	}
	clock.Add(6500 * time.Millisecond) // 3.5 s left, 2.5 s after the margin
	g, ok := m.Begin(flow(0), 2*time.Second)
	if !ok {
		t.Fatal("2 s call refused with 2.5 s of room")
	}
	if d, capped := g.Bound(clock.Now(), 30*time.Second); !capped || d != 2500*time.Millisecond {
		t.Fatalf("bound %s capped %v", d, capped)
	}
	g.End()
	if _, ok := m.Begin(flow(0), 3*time.Second); ok {
		t.Fatal("3 s call granted with 2.5 s of room")
	}
	if _, ok := m.Begin(flow(0), 30*time.Second); ok {
		t.Fatal("a long call needs TTL/2 of room; granted with 2.5 s")
	}
	clock.Add(4 * time.Second) // past the local expiry
	if m.Owns(flow(0)) {
		t.Fatal("owns a lease past its local expiry")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cfg, err := partlease.Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 10*time.Second || cfg.RenewEvery != cfg.TTL/3 || cfg.RetryEvery != cfg.TTL/20 || cfg.Margin != time.Second || cfg.HostID == "" {
		t.Fatalf("defaults %+v", cfg)
	}
	if host, _ := os.Hostname(); !strings.HasPrefix(cfg.HostID, strings.ReplaceAll(host, " ", "_")) {
		t.Fatalf("host id %q does not start with the hostname", cfg.HostID)
	}
	for _, bad := range []partlease.Config{
		{HostID: "a b"},
		{TTL: time.Millisecond},
		{TTL: time.Second, RenewEvery: 900 * time.Millisecond},
		{TTL: time.Second, Margin: 600 * time.Millisecond},
		{TTL: time.Second, RetryEvery: 400 * time.Millisecond},
		{HostID: strings.Repeat("x", 200)},
	} {
		if _, err := bad.WithDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestRanges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{5}, "5"},
		{[]int{3, 1, 2, 2, 7, 9, 8, 0}, "0-3,7-9"},
		{[]int{0, 2, 4}, "0,2,4"},
	} {
		if got := partlease.Ranges(tc.in); got != tc.want {
			t.Errorf("Ranges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func mustTable(t *testing.T, ctx context.Context, c *valkey.Client) valkey.PartitionLeaseTable {
	t.Helper()
	tbl, err := c.ReadPartitionLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}
