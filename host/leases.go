package host

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// ErrLeaseEnded is matched by a plugin call cut at the deadline of its
// partition leases: the call's grant leaves at least min(timeout, TTL/2)
// (partlease.Manager.Begin), so a call that runs past it has run past its
// budget. Like a timeout (it matches ErrTimeout too) it is a fault: the
// plugin is quarantined.
var ErrLeaseEnded = errors.New("host: partition lease ending")

// newLeases makes the host's lease manager and the service running it,
// nil when leases are off.
func (h *Host) newLeases() error {
	if h.cfg.Backend == nil || h.cfg.Leases.Disabled {
		return nil
	}
	m, err := partlease.New(h.cfg.Leases, h.cfg.Backend, h.cfg.Partitions, partlease.Options{
		Clock: h.cfg.Clock.Now, Logger: h.cfg.Logger, OnGain: h.partitionGained,
	})
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	h.leases = m
	h.leaseSvc = &leaseService{m: m, logger: h.cfg.Logger}
	return nil
}

// beginPartition asks for a call of timeout on part: always granted
// without leases, else only on a partition this host holds with room for
// the call.
func (h *Host) beginPartition(part model.Partition, timeout time.Duration) (partlease.Grant, bool) {
	if h.leases == nil {
		return partlease.Grant{}, true
	}
	return h.leases.Begin(part, timeout)
}

// partitionGained wakes a newly acquired partition in every timer-driven
// plugin of its family, so it is scanned at once rather than at the next
// poll.
func (h *Host) partitionGained(part model.Partition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.plugins {
		if p.wake == nil {
			continue
		}
		if man := p.mod.Load().Manifest(); man.PartitionFamily() == part.Family {
			p.wake.wake(int(part.Index), "", h.cfg.Clock.Now())
		}
	}
}

// ownedCompletions keeps the completions whose flow partition this host
// holds (every host receives every completion; the flow partition's owner
// handles it) and holds a grant on each such partition until release is
// called. deadline is the earliest grant's (zero without leases).
//
// A completion published while its partition changes hands is dropped by
// every host; dependency_reconciler and the edge_cancel sweep repair it,
// as they repair completions published while the listener reconnects.
func (h *Host) ownedCompletions(batch []abi.Completion, timeout time.Duration) (kept []abi.Completion, deadline time.Time, release func()) {
	if h.leases == nil {
		return batch, time.Time{}, func() {}
	}
	grants := map[model.Partition]partlease.Grant{}
	refused := map[model.Partition]bool{}
	for _, c := range batch {
		fid, err := model.ParseUUID(c.FlowID)
		if err != nil {
			continue // parseCompletion let only valid ids through
		}
		part := h.cfg.Partitions.FlowPartition(fid)
		if refused[part] {
			continue
		}
		if _, ok := grants[part]; !ok {
			g, ok := h.leases.Begin(part, timeout)
			if !ok {
				refused[part] = true
				continue
			}
			grants[part] = g
			if deadline.IsZero() || g.Deadline.Before(deadline) {
				deadline = g.Deadline
			}
		}
		kept = append(kept, c)
	}
	return kept, deadline, func() {
		for _, g := range grants {
			g.End()
		}
	}
}

// Leases returns this host's view of its partition leases; false when
// leases are off.
func (h *Host) Leases() (partlease.Status, bool) {
	if h.leases == nil {
		return partlease.Status{}, false
	}
	return h.leases.Status(), true
}

// HostID returns the id this host holds partition leases under ("" when
// leases are off).
func (h *Host) HostID() string {
	if h.leases == nil {
		return ""
	}
	return h.leases.HostID()
}
