package valkey_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestPartitionLeaseLifecycle walks one partition lease through acquire,
// renew, a refused claim by a peer, expiry and takeover, a refused stale
// release and a release: the token grows at every acquisition and never
// otherwise.
func TestPartitionLeaseLifecycle(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	p := model.Partition{Family: model.FamilyFlow, Index: 7}
	claim := func(host string, ttl time.Duration, token int64) valkey.PartitionClaimResult {
		t.Helper()
		r := c.ClaimPartitions(ctx, host, ttl, []valkey.PartitionClaim{{Partition: p, Token: token}})[0]
		if r.Err != nil {
			t.Fatalf("claim %s by %s: %v", p, host, r.Err)
		}
		return r
	}

	a := claim("a", time.Minute, 0)
	if a.Outcome != valkey.ClaimAcquired || a.Owner != "a" || a.Token != 1 || a.ExpiresAtMs == 0 {
		t.Fatalf("first claim: %+v", a)
	}
	if r := claim("a", time.Minute, 1); r.Outcome != valkey.ClaimRenewed || r.Token != 1 || r.ExpiresAtMs < a.ExpiresAtMs {
		t.Fatalf("renew: %+v", r)
	}
	if r := claim("a", time.Minute, 0); r.Outcome != valkey.ClaimRenewed || r.Token != 1 {
		t.Fatalf("idempotent acquire by the holder: %+v", r)
	}
	if r := claim("a", time.Minute, 9); r.Outcome != valkey.ClaimHeld || r.Owner != "a" || r.Token != 1 {
		t.Fatalf("renew under a wrong token must not extend: %+v", r)
	}
	if r := claim("b", time.Minute, 0); r.Outcome != valkey.ClaimHeld || r.Owner != "a" || r.Token != 1 {
		t.Fatalf("peer claim of a live lease: %+v", r)
	}

	// Shorten a's lease, let it expire, and b takes over with token 2.
	if r := claim("a", 50*time.Millisecond, 1); r.Outcome != valkey.ClaimRenewed {
		t.Fatalf("short renew: %+v", r)
	}
	var b valkey.PartitionClaimResult
	valkeytest.Eventually(t, 30*time.Second, "b takes over the expired lease", func() bool {
		b = claim("b", time.Minute, 0)
		return b.Outcome == valkey.ClaimAcquired
	})
	if b.Token != 2 || b.Owner != "b" {
		t.Fatalf("takeover: %+v", b)
	}
	if r := claim("a", time.Minute, 1); r.Outcome != valkey.ClaimHeld || r.Owner != "b" {
		t.Fatalf("the old holder's renew after takeover: %+v", r)
	}
	errs := c.ReleasePartitions(ctx, "a", []valkey.PartitionClaim{{Partition: p, Token: 1}})
	if !errors.Is(errs[0], valkey.ErrNotLeaseOwner) {
		t.Fatalf("stale release: %v", errs[0])
	}
	if errs := c.ReleasePartitions(ctx, "b", []valkey.PartitionClaim{{Partition: p, Token: 2}}); errs[0] != nil {
		t.Fatalf("release: %v", errs[0])
	}
	if r := claim("a", time.Minute, 0); r.Outcome != valkey.ClaimAcquired || r.Token != 3 {
		t.Fatalf("claim after release: %+v", r)
	}

	tbl, err := c.ReadPartitionLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parts := c.Partitions()
	if want := int(parts.Flow) + int(parts.Budget) + int(parts.Quota); len(tbl.Leases) != want {
		t.Fatalf("%d leases read, want %d", len(tbl.Leases), want)
	}
	for _, l := range tbl.Leases {
		want := ""
		if l.Partition == p {
			want = "a"
		}
		if l.Owner != want {
			t.Fatalf("lease %s owner %q, want %q", l.Partition, l.Owner, want)
		}
		if l.Partition == p && (l.Token != 3 || l.ExpiresAtMs <= tbl.NowMs) {
			t.Fatalf("lease %+v at %d", l, tbl.NowMs)
		}
	}
}

// TestHostMembership: heartbeats list the live hosts by id, an expired
// host drops out, and a host that leaves is gone at once.
func TestHostMembership(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	ids := func(ms []valkey.HostMember) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = m.ID
		}
		return out
	}
	if _, _, err := c.HostHeartbeat(ctx, "zeta", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.HostHeartbeat(ctx, "short", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	now, ms, err := c.HostHeartbeat(ctx, "alpha", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ms); len(got) < 2 || got[0] != "alpha" || got[len(got)-1] != "zeta" {
		t.Fatalf("members %v", got)
	}
	if ms[0].ExpiresAtMs < now+50_000 {
		t.Fatalf("alpha expires at %d, now %d", ms[0].ExpiresAtMs, now)
	}
	valkeytest.Eventually(t, 30*time.Second, "the short-lived member expires", func() bool {
		_, ms, err = c.HostHeartbeat(ctx, "alpha", time.Minute)
		return err == nil && len(ms) == 2
	})
	if err := c.HostLeave(ctx, "zeta"); err != nil {
		t.Fatal(err)
	}
	tbl, err := c.ReadPartitionLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(tbl.Members); len(got) != 1 || got[0] != "alpha" {
		t.Fatalf("members after leave %v", got)
	}

	// Bad input is refused with invalid_input and changes nothing.
	if _, _, err := c.HostHeartbeat(ctx, "", time.Minute); valkey.CodeOf(err) != "invalid_input" {
		t.Fatalf("empty host id: %v", err)
	}
	r := c.ClaimPartitions(ctx, "", time.Minute, []valkey.PartitionClaim{{Partition: model.Partition{Family: model.FamilyQuota}}})
	if valkey.CodeOf(r[0].Err) != "invalid_input" {
		t.Fatalf("claim with an empty host id: %+v", r[0])
	}
}
