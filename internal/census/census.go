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
//   - One Take is three pipelined round trips (the third reads the
//     partition leases) (the lanes, then every count
//     and oldest score of every flow partition), O(partitions × lanes),
//     never O(executions).
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
	// Ownership is which host holds which partitions (partition leases);
	// no hosts when none holds a lease (leases off or no host running).
	Ownership *partlease.Ownership `json:"ownership,omitempty"`
}

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
	"lease_expiry":       func(k model.PartitionKeys, _ []string) []string { return []string{k.LeaseExpiry()} },
	"attempt_timeout":    func(k model.PartitionKeys, _ []string) []string { return []string{k.AttemptTimeout()} },
	"execution_deadline": func(k model.PartitionKeys, _ []string) []string { return []string{k.ExecutionDeadline()} },
	"suspension_timeout": func(k model.PartitionKeys, _ []string) []string { return []string{k.SuspensionTimeout()} },
	"pending_wp_expiry":  func(k model.PartitionKeys, _ []string) []string { return []string{k.PendingWaitpointExpiry()} },
}

// DuePlugins returns the names of the plugins whose lag a census measures.
func DuePlugins() []string {
	out := make([]string, 0, len(dueIndexes))
	for n := range dueIndexes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
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
	cen := &Census{At: time.UnixMilli(nowMs), Lanes: lanes, Executions: map[string]int64{}, LagMs: map[string]int64{}}
	for _, s := range States {
		cen.Executions[s] = 0
	}

	type probe struct {
		state  string // a count, or
		plugin string // an oldest-score read
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
		for _, name := range plugins {
			for _, idx := range dueIndexes[name](k, lanes) {
				cmds = append(cmds, raw.B().Zrange().Key(idx).Min("0").Max("0").Withscores().Build())
				probes = append(probes, probe{plugin: name})
			}
		}
	}
	for _, name := range plugins {
		cen.LagMs[name] = 0
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		p := probes[i]
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
	tbl, err := c.ReadPartitionLeases(ctx)
	if err != nil {
		return nil, fmt.Errorf("census: partition leases: %w", err)
	}
	own := partlease.Summarize(tbl)
	cen.Ownership = &own
	return cen, nil
}
