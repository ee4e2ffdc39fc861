package host

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// TestLeaseServiceStartStop: the lease service holds this host's share
// when Start returns (before any loop would start), keeps it from a peer
// while running (also once Start's context ended), and releases it on
// Stop so the peer takes over at once, long before the leases would
// expire.
func TestLeaseServiceStartStop(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, time.Minute)
	parts := model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	manager := func(id string) *partlease.Manager {
		m, err := partlease.New(partlease.Config{HostID: id, TTL: time.Minute}, c, parts, partlease.Options{Logger: valkeytest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	flow := func(m *partlease.Manager) (n int) {
		for i := range parts.Flow {
			if m.Owns(model.Partition{Family: model.FamilyFlow, Index: i}) {
				n++
			}
		}
		return n
	}

	a := &leaseService{m: manager("host-a"), logger: valkeytest.Logger()}
	startCtx, endStart := context.WithCancel(ctx)
	if err := a.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	endStart() // only Stop ends the renewals (loops outlive their context in shutdown)
	if n := flow(a.m); n != int(parts.Flow) {
		t.Fatalf("host-a holds %d of %d flow partitions when Start returns", n, parts.Flow)
	}
	<-a.Started()

	b := manager("host-b")
	if _, err := b.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// A running host-a hands host-b its half at once (a stopped one would
	// hold it for the TTL) and keeps its own.
	stepUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 30s: %s: host-a %+v, host-b %+v", what, a.m.Status(), b.Status())
			}
			if _, err := b.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // a step per 10 ms: RunOnce has no signal to wait on
		}
	}
	stepUntil("host-a hands host-b its half", func() bool { return flow(b) == int(parts.Flow)/2 })
	if n := flow(a.m); n != int(parts.Flow)/2 {
		t.Fatalf("host-a holds %d flow partitions beside host-b, want %d", n, parts.Flow/2)
	}

	a.Stop()
	a.Stop()
	if n := flow(a.m); n != 0 {
		t.Fatalf("host-a still holds %d flow partitions after Stop", n)
	}
	// The TTL is a minute: only a released lease can pass this soon.
	stepUntil("host-b takes every partition once host-a stopped", func() bool { return flow(b) == int(parts.Flow) })
}
