package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// runFastPath (scenario 14) says where the SDK's server CPU per execution
// goes beyond the contract: in one run it measures the bare functions of
// one execution (create, fabric_claim_next, complete; no SDK around them)
// and the captured writes they leave (the floor), then fabric's SDK e2e
// at each W with eligible-work notifications on (the default) and off,
// each with its server commands per execution set against the bare
// functions' (INFO commandstats, diffed).
func runFastPath(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n := max(e.size.E2EJobs/4, 1)
	sc.Size = fmt.Sprintf("%d executions per run, %d producers, W ∈ %v, workers of concurrency 1", n, e.size.Producers, e.size.Workers)
	vc, part, cmds, err := floorSetup(ctx, e)
	if err != nil {
		return err
	}
	defer vc.Close()
	_, evalUs, err := floorReplay(ctx, e, vc, cmds, n, func() []floorIDs { return freshFloorIDs(part, n) })
	if err != nil {
		return err
	}
	before, usBefore, _ := e.commandCounters(ctx)
	createUs, claimUs, completeUs, cpu, err := floorFunctions(ctx, e, vc, part, n, floorConcurrency)
	if err != nil {
		return err
	}
	after, usAfter, _ := e.commandCounters(ctx)
	fnCmds := perJob(before, after, int64(n))
	fnUsec := perJob(usBefore, usAfter, int64(n))
	fnUs := createUs + claimUs + completeUs
	fnTotal, _ := topCommands(fnCmds, 0)
	sc.Rows = append(sc.Rows, Row{Measure: "server CPU µs per execution, functions alone", Fabric: fnUs,
		Versus: "contract floor (the writes, one EVALSHA)", Peer: evalUs, Unit: "µs",
		Note: fmt.Sprintf("%d executions, %d in flight, phase by phase (ff_create_execution %s, fabric_claim_next %s, ff_complete_execution %s µs); %s commands per execution (%s); %s",
			n, floorConcurrency, fmtNum(createUs, ""), fmtNum(claimUs, ""), fmtNum(completeUs, ""), fmtNum(fnTotal, ""), fmtAllCommands(fnCmds), cpuLabel(cpu))},
		usecRow("functions alone", fnUsec))
	for _, w := range e.size.Workers {
		for _, mode := range []notifyMode{notifyWorkers, notifyUnheard, notifyOff} {
			_, usBefore, _ := e.commandCounters(ctx)
			r, sdkCmds, err := fabricE2EWith(ctx, e, n, w, mode)
			if err != nil {
				return fmt.Errorf("fabric W=%d: %w", w, err)
			}
			what := mode.String()
			_, usAfter, _ := e.commandCounters(ctx)
			total, _ := topCommands(sdkCmds, 0)
			sc.Rows = append(sc.Rows,
				Row{Measure: fmt.Sprintf("server CPU µs per execution, SDK W=%d, %s", w, what), Fabric: r.cpuUs,
					Versus: "functions alone", Peer: fnUs, Unit: "µs",
					Note: fmt.Sprintf("%s/s%s; %s commands per execution against the functions' %s; per command, SDK (functions alone): %s",
						fmtNum(r.rate(), ""), r.cappedNote(), fmtNum(total, ""), fmtNum(fnTotal, ""), fmtCommandDiff(sdkCmds, fnCmds))},
				Row{Measure: fmt.Sprintf("server CPU µs per execution, SDK W=%d, %s, against the floor", w, what), Fabric: r.cpuUs,
					Versus: "contract floor (the writes, one EVALSHA)", Peer: evalUs, Unit: "µs", Goal: "≤ 1.3× floor at W=8"},
				usecRow(fmt.Sprintf("SDK W=%d, %s", w, what), perJob(usBefore, usAfter, r.done)))
		}
	}
	sc.Notes = append(sc.Notes,
		"Server CPU is INFO cpu's main thread (sys+user) over the run / executions; commands are INFO commandstats diffed (commands run inside FCALLs included; INFO left out).",
		"functions alone: the calls one SDK execution makes (ff_create_execution, fabric_claim_next of one, ff_complete_execution) with nothing around them, 8 in flight; floor: the writes they leave (captured with MONITOR) replayed as one EVALSHA per execution.",
		"SDK: scenario 1's run (producers call CreateExecution while W workers run Worker.Run); “no worker subscribed” sets sdk.WorkerConfig.DisableNotifications with notify-keyspace-events Ez (as a fabric host sets them: every zset write publishes, nobody listens); “off” also clears notify-keyspace-events.")
	return nil
}

// fmtAllCommands renders every command's count per execution, the most
// frequent first ("hset 7.00, zadd 5.00, ...").
func fmtAllCommands(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if c := -cmp.Compare(m[a], m[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if k == "info" {
			continue
		}
		parts = append(parts, k+" "+fmtNum(m[k], ""))
	}
	return strings.Join(parts, ", ")
}

// fmtCommandDiff renders, for every command whose count per execution
// differs between sdk and fn by 0.01 or more, "name sdk (fn)", the
// largest difference first.
func fmtCommandDiff(sdkCmds, fn map[string]float64) string {
	keys := map[string]bool{}
	for k := range sdkCmds {
		keys[k] = true
	}
	for k := range fn {
		keys[k] = true
	}
	delete(keys, "info")
	var ks []string
	for k := range keys {
		if math.Abs(sdkCmds[k]-fn[k]) >= 0.01 {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b string) int {
		if c := -cmp.Compare(math.Abs(sdkCmds[a]-fn[a]), math.Abs(sdkCmds[b]-fn[b])); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	if len(ks) == 0 {
		return "the same"
	}
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %s (%s)", k, fmtNum(sdkCmds[k], ""), fmtNum(fn[k], "")))
	}
	return strings.Join(parts, ", ")
}

// usecRow is the row of what: the commands' own time per execution
// (INFO commandstats usec, diffed): FCALL's time includes the commands
// its function runs, so the rest of it is the script's own (Lua, call
// setup, replies) and is shown as such.
func usecRow(what string, us map[string]float64) Row {
	delete(us, "info")
	fcall := us["fcall"]
	var inner, other float64
	for k, v := range us {
		if k != "fcall" {
			inner += v
		}
	}
	// Outside FCALL, the SDK's own commands (reads, scans): their time is
	// not part of fcall's, so it is counted apart. Commands run both in
	// and out of scripts cannot be told apart; ZRANGEBYSCORE, PING, GET
	// of a worker and the like are only sent outside here.
	for _, k := range []string{"zrangebyscore", "ping", "config", "subscribe", "client"} {
		other += us[k]
	}
	total := fcall + other
	return Row{Measure: "server command µs per execution, " + what, Fabric: total, Peer: nan(), Unit: "µs",
		Note: fmt.Sprintf("%s: FCALL %s µs, of which the commands its functions run %s µs and the scripts' own work (Lua, call setup, replies) %s µs; outside FCALL %s µs; by command: %s",
			what, fmtNum(fcall, ""), fmtNum(inner-other, ""), fmtNum(fcall-(inner-other), ""), fmtNum(other, ""), fmtAllCommands(us))}
}
