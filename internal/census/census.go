// Package census reads what a deployment's keyspace says about its
// executions: how many sit in each lane index (executions by state) and,
// for each due-time scanner, how late the oldest due item is (lag).
//
//	c, err := census.Take(ctx, client)
//	fmt.Println(c.Executions["active"], c.LagMs["lease_expiry"])
//
// It also reads who holds which partition lease (Ownership).
//
// # Notes
//
//   - One Take is four pipelined round trips (the lanes; every count and
//     oldest score of every flow partition; the ownership of up to 16 due
//     lease_expiry heads per partition; the partition leases),
//     O(partitions × lanes), never O(executions).
//   - Lag counts only what a scanner will act on: a lease already marked
//     expired waits for a worker to reclaim it and is counted in Waiting
//     with its cause instead.
//   - Executions are counted by lane index, not by reading every
//     execution's public_state: "eligible", "delayed", "active",
//     "suspended", "blocked" (the five blocked:* indexes) and "terminal"
//     (until the retention trimmer removes them).
package census

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// States are the execution states a census counts, in display order.
var States = []string{"eligible", "delayed", "active", "suspended", "blocked", "terminal"}

// Census is one reading of the keyspace.
type Census struct {
	// At is the server's clock at the reading.
	At time.Time `json:"at"`
	// Lanes are the deployment's lanes (ff:idx:lanes).
	Lanes []string `json:"lanes"`
	// Executions counts executions by state (see States).
	Executions map[string]int64 `json:"executions"`
	// LagMs is, per due-time scanner plugin, how long ago the oldest item
	// of its due indexes became due, in milliseconds (0: nothing due).
	// Plugins without a due index are absent.
	LagMs map[string]int64 `json:"lag_ms"`
	// Waiting is, per due-time scanner plugin, the due items its scanner
	// has already handled and that now wait on something outside it
	// (for lease_expiry: leases marked expired, awaiting reclaim by a
	// worker of their lane). They are not in LagMs: no scanner will act
	// on them. Plugins with none are absent.
	Waiting map[string]Waiting `json:"waiting,omitempty"`
	// Ownership is which host holds which partitions (partition leases);
	// no hosts when none holds a lease (leases off or no host running).
	Ownership *partlease.Ownership `json:"ownership,omitempty"`
}

// Waiting counts due items that wait on something outside their
// scanner.
type Waiting struct {
	// Count is how many were seen (at most waitHeads per partition, so a
	// lower bound when AtLeast is set).
	Count int64 `json:"count"`
	// AtLeast is set when some partition had more than could be read.
	AtLeast bool `json:"at_least,omitempty"`
	// OldestMs is how long ago the oldest of them became due.
	OldestMs int64 `json:"oldest_ms"`
	// Cause names what they wait for.
	Cause string `json:"cause"`
}

// String prints the count and the cause ("≥16 awaiting reclaim …").
func (w Waiting) String() string {
	n := fmt.Sprint(w.Count)
	if w.AtLeast {
		n = ">=" + n
	}
	return n + " " + w.Cause
}

// waitHeads is how many due lease_expiry members a census reads per
// partition to tell the marked ones (awaiting reclaim) from the rest.
const waitHeads = 16

// CauseAwaitingReclaim is the Waiting cause of leases marked expired or
// revoked: the lease-expiry scanner is done with them; a worker of their
// lane must reclaim them (or, past the reclaim limit, the reclaim fails
// them).
const CauseAwaitingReclaim = "awaiting reclaim by a worker of their lane"

// dueIndexes are the due-time indexes each scanner plugin drains, by
// plugin name: a member whose score is at or before now is due.
var dueIndexes = map[string]func(k model.PartitionKeys, lanes []string) []string{
	"delayed_promoter": func(k model.PartitionKeys, lanes []string) []string {
		out := make([]string, len(lanes))
		for i, l := range lanes {
			out[i] = k.LaneDelayed(l)
		}
		return out
	},
	"attempt_timeout":    func(k model.PartitionKeys, _ []string) []string { return []string{k.AttemptTimeout()} },
	"execution_deadline": func(k model.PartitionKeys, _ []string) []string { return []string{k.ExecutionDeadline()} },
	"suspension_timeout": func(k model.PartitionKeys, _ []string) []string { return []string{k.SuspensionTimeout()} },
	"pending_wp_expiry":  func(k model.PartitionKeys, _ []string) []string { return []string{k.PendingWaitpointExpiry()} },
}

// DuePlugins returns the names of the plugins whose lag a census measures.
func DuePlugins() []string {
	out := make([]string, 0, len(dueIndexes)+1)
	for n := range dueIndexes {
		out = append(out, n)
	}
	out = append(out, "lease_expiry")
	sort.Strings(out)
	return out
}

// splitDueLeases reads the ownership of the due lease_expiry heads in one
// pipelined round trip: a lease not yet marked is the lease-expiry
// scanner's lag; one already marked expired or revoked waits for a
// worker to reclaim it (Waiting).
func (cen *Census) splitDueLeases(ctx context.Context, c *valkey.Client, due []vk.ZScore, nowMs int64) error {
	cen.LagMs["lease_expiry"] = 0
	if len(due) == 0 {
		delete(cen.Waiting, "lease_expiry")
		return nil
	}
	raw := c.Raw()
	cmds := make(vk.Commands, len(due))
	for i, z := range due {
		cmds[i] = raw.B().Hget().Key(model.KeysFor(model.ExecutionID(z.Member)).Core()).Field("ownership_state").Build()
	}
	w := cen.Waiting["lease_expiry"]
	w.Cause = CauseAwaitingReclaim
	for i, r := range raw.DoMulti(ctx, cmds...) {
		own, err := r.ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return fmt.Errorf("census: read lease owner: %w", err)
		}
		age := nowMs - int64(due[i].Score)
		if own == model.OwnershipLeaseExpiredReclaimable || own == model.OwnershipLeaseRevoked {
			w.Count++
			w.OldestMs = max(w.OldestMs, age)
			continue
		}
		cen.LagMs["lease_expiry"] = max(cen.LagMs["lease_expiry"], age)
	}
	if w.Count == 0 {
		delete(cen.Waiting, "lease_expiry")
		return nil
	}
	cen.Waiting["lease_expiry"] = w
	return nil
}

// laneCounts are the lane indexes counted per state.
func laneCounts(k model.PartitionKeys, lane string) [][2]string {
	return [][2]string{
		{"eligible", k.LaneEligible(lane)},
		{"delayed", k.LaneDelayed(lane)},
		{"active", k.LaneActive(lane)},
		{"suspended", k.LaneSuspended(lane)},
		{"blocked", k.LaneBlockedDependencies(lane)},
		{"blocked", k.LaneBlockedBudget(lane)},
		{"blocked", k.LaneBlockedQuota(lane)},
		{"blocked", k.LaneBlockedRoute(lane)},
		{"blocked", k.LaneBlockedOperator(lane)},
		{"terminal", k.LaneTerminal(lane)},
	}
}

// Take reads one census of c's deployment.
func Take(ctx context.Context, c *valkey.Client) (*Census, error) {
	raw := c.Raw()
	first := raw.DoMulti(ctx,
		raw.B().Smembers().Key(model.KeyLanesIndex).Build(),
		raw.B().Time().Build())
	lanes, err := first[0].AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("census: read %s: %w", model.KeyLanesIndex, err)
	}
	sort.Strings(lanes)
	tm, err := first[1].AsIntSlice()
	if err != nil || len(tm) != 2 {
		return nil, fmt.Errorf("census: TIME: %w", err)
	}
	nowMs := tm[0]*1000 + tm[1]/1000
	cen := &Census{At: time.UnixMilli(nowMs), Lanes: lanes, Executions: map[string]int64{}, LagMs: map[string]int64{},
		Waiting: map[string]Waiting{}}
	for _, s := range States {
		cen.Executions[s] = 0
	}

	type probe struct {
		state  string // a count, or
		plugin string // an oldest-score read, or
		leases bool   // the due heads of lease_expiry
	}
	var cmds []vk.Completed
	var probes []probe
	plugins := DuePlugins()
	for i := range int(c.Partitions().Flow) {
		k := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: uint16(i)})
		for _, l := range lanes {
			for _, sc := range laneCounts(k, l) {
				cmds = append(cmds, raw.B().Zcard().Key(sc[1]).Build())
				probes = append(probes, probe{state: sc[0]})
			}
		}
		cmds = append(cmds, raw.B().Zrangebyscore().Key(k.LeaseExpiry()).Min("-inf").Max(fmt.Sprint(nowMs)).
			Withscores().Limit(0, waitHeads+1).Build())
		probes = append(probes, probe{leases: true})
		for _, name := range plugins {
			if dueIndexes[name] == nil {
				continue
			}
			for _, idx := range dueIndexes[name](k, lanes) {
				cmds = append(cmds, raw.B().Zrange().Key(idx).Min("0").Max("0").Withscores().Build())
				probes = append(probes, probe{plugin: name})
			}
		}
	}
	for _, name := range plugins {
		cen.LagMs[name] = 0
	}
	var due []vk.ZScore // due lease_expiry heads, told apart below
	for i, r := range raw.DoMulti(ctx, cmds...) {
		p := probes[i]
		if p.leases {
			zs, err := r.AsZScores()
			if err != nil {
				return nil, fmt.Errorf("census: ZRANGEBYSCORE lease_expiry: %w", err)
			}
			if len(zs) > waitHeads {
				zs = zs[:waitHeads]
				w := cen.Waiting["lease_expiry"]
				w.AtLeast = true
				cen.Waiting["lease_expiry"] = w
			}
			due = append(due, zs...)
			continue
		}
		if p.state != "" {
			n, err := r.AsInt64()
			if err != nil {
				return nil, fmt.Errorf("census: ZCARD: %w", err)
			}
			cen.Executions[p.state] += n
			continue
		}
		zs, err := r.AsZScores()
		if err != nil {
			return nil, fmt.Errorf("census: ZRANGE: %w", err)
		}
		if len(zs) == 1 && int64(zs[0].Score) <= nowMs {
			if lag := nowMs - int64(zs[0].Score); lag > cen.LagMs[p.plugin] {
				cen.LagMs[p.plugin] = lag
			}
		}
	}
	if err := cen.splitDueLeases(ctx, c, due, nowMs); err != nil {
		return nil, err
	}
	tbl, err := c.ReadPartitionLeases(ctx)
	if err != nil {
		return nil, fmt.Errorf("census: partition leases: %w", err)
	}
	own := partlease.Summarize(tbl)
	cen.Ownership = &own
	return cen, nil
}
