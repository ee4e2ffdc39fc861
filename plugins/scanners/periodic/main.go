// Command periodic is the fabric scanner plugin that fires periodic
// schedules (fixed intervals and cron expressions, written by the SDK's
// Client.AddSchedule or `fabric periodic add`): for each partition it
// reads the due schedules of ff:idx:{fp:N}:periodic, and for each one
// creates the tick's execution and advances the schedule to its next tick,
// in one pipelined batch.
//
// Exactly once per tick across hosts: the tick's execution id is derived
// from the schedule name and the tick (periodic.TickID), so every host
// that fires the same tick creates the same execution and
// ff_create_execution answers DUPLICATE to all but the first;
// fabric_periodic_advance then moves the schedule only if it is still at
// that tick and the execution exists (a compare-and-set), so a failed
// create leaves the tick to fire again and a slow host cannot move a
// schedule back.
//
// Late ticks (a slow host) fire one by one; ticks missed by more than
// periodic.CatchUp (every host down) are skipped: the overdue tick fires
// once and the schedule moves to the first tick after now.
//
// Configuration: none. The scanner filter ("namespace", "instance_tag")
// does not apply: a schedule's executions do not exist before it fires.
package main

import (
	"encoding/json"
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Creator is the creator_identity of fired executions.
const Creator = periodic.Creator

// Plugin is the periodic scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("periodic", 1000, 50,
		[]string{"ff_create_execution", "fabric_periodic_advance"},
		[]string{"ff:idx:*:periodic", "ff:periodic:*"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:periodic"}),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	keys := model.KeysOn(req.Partition)
	index := keys.PeriodicIndex()
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		PreRead: func(_, member string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HGETALL", Key: keys.PeriodicSchedule(member)}}
		},
		Subject: func(d pdk.Due) string {
			return string(periodic.TickID(req.Partition, d.Member, int64(d.Score)))
		},
		Call: func(d pdk.Due) []abi.Call {
			return fire(h, req.Partition, d)
		},
		// Report the next schedule's tick so the host's timers wake the
		// partition on time rather than at the next safety poll.
		NextDue: true,
	}.Run(h, req)
}

// fire builds the calls of one due schedule: create the tick's execution,
// then advance the schedule.
func fire(h pdk.Host, p model.Partition, d pdk.Due) []abi.Call {
	keys := model.KeysOn(p)
	name, tick := d.Member, int64(d.Score)
	def := map[string]string{}
	if len(d.Reads) == 1 && d.Reads[0].Err == "" {
		flat := d.Reads[0].Values
		for i := 0; i+1 < len(flat); i += 2 {
			def[flat[i]] = flat[i+1]
		}
	}
	advance := func(tick, next int64) abi.Call {
		eid := periodic.TickID(p, name, tick)
		return abi.Call{Function: "fabric_periodic_advance", Item: name,
			Keys: []string{keys.PeriodicSchedule(name), keys.PeriodicIndex(), model.KeysFor(eid).Core()},
			Args: []string{name, pdk.Itoa(tick), pdk.Itoa(next), string(eid)}}
	}
	if len(def) == 0 {
		// Removed since the index read: the advance drops the entry.
		return []abi.Call{advance(tick, 0)}
	}
	timing, err := periodic.TimingOf(def)
	if err != nil {
		h.Log(abi.LogWarn, "schedule "+name+": "+err.Error()+"; removing it from the index")
		return []abi.Call{advance(tick, 0)}
	}
	if def[periodic.FieldNextDueMs] != pdk.Itoa(tick) {
		return nil // index and hash disagree mid-update; the next scan sees both
	}
	var tags map[string]string
	if t := def[periodic.FieldTags]; t != "" {
		_ = json.Unmarshal([]byte(t), &tags) // the SDK wrote it; garbage means no tags
	}
	if tags == nil {
		tags = map[string]string{}
	}
	policy := def[periodic.FieldPolicy]
	if policy == "" {
		policy = "{}"
	}
	priority, _ := strconv.Atoi(def[periodic.FieldPriority]) // "" or garbage: 0
	// Every overdue tick (up to MaxTicksPerScan) fires in this batch: each
	// create is followed by the advance from its tick to the next, a chain
	// of compare-and-sets applied in order.
	var calls []abi.Call
	for n := 0; n < MaxTicksPerScan; n++ {
		calls = append(calls, createCall(p, name, tick, def, tags, policy, priority))
		next := timing.After(tick, d.NowMs)
		calls = append(calls, advance(tick, next))
		if next == 0 || next > d.NowMs {
			break
		}
		tick = next
	}
	return calls
}

// MaxTicksPerScan bounds the overdue ticks of one schedule fired by one
// scan (a host catching up after a stall); the rest fire on the next.
const MaxTicksPerScan = 16

// createCall is ff_create_execution of name's tick.
func createCall(p model.Partition, name string, tick int64, def, tags map[string]string, policy string, priority int) abi.Call {
	t := make(map[string]string, len(tags)+2)
	for k, v := range tags {
		t[k] = v
	}
	t[periodic.TagSchedule] = name
	t[periodic.TagTick] = pdk.Itoa(tick)
	c := fcall.CreateExecutionParams[fcall.Millis]{ExecutionID: periodic.TickID(p, name, tick), Namespace: def[periodic.FieldNamespace],
		LaneID: def[periodic.FieldLane], ExecutionKind: def[periodic.FieldKind], Priority: priority,
		CreatorIdentity: Creator, PolicyJSON: policy, Payload: def[periodic.FieldPayload], Tags: t}
	call := pdk.CallOf(c.Call())
	call.Item = name
	return call
}
