package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/sdk"
)

// expiryMode is one timeout a scanner detects: its plugin, the index the
// claim scores, and FlowFabric's polling interval for it.
type expiryMode struct {
	name, plugin string
	// interval is FlowFabric's scanner interval (engine spec §9).
	interval time.Duration
	// claim sets the claim so the timeout falls at ttl from now.
	claim func(p *valkey.ClaimExecutionParams, ttl time.Duration)
	// index is the due index the claim scores (the due time, exactly).
	index func(k model.PartitionKeys) string
}

var expiryModes = []expiryMode{
	{name: "lease expiry: lease expires → lease_expired_reclaimable", plugin: "lease_expiry", interval: 1500 * time.Millisecond,
		claim: func(p *valkey.ClaimExecutionParams, ttl time.Duration) { p.LeaseTTLMs = ttl.Milliseconds() },
		index: func(k model.PartitionKeys) string { return k.LeaseExpiry() }},
	{name: "attempt timeout: deadline → timed out", plugin: "attempt_timeout", interval: 2 * time.Second,
		claim: func(p *valkey.ClaimExecutionParams, ttl time.Duration) {
			p.LeaseTTLMs, p.AttemptTimeoutMs = 120_000, ttl.Milliseconds()
		},
		index: func(k model.PartitionKeys) string { return k.AttemptTimeout() }},
}

// runExpiry measures how late fabric's lease_expiry and attempt_timeout
// scanners (on due-time timers) act on a burst of claims whose lease or
// attempt timeout falls evenly over PromoteSpread across the flow
// partitions; FlowFabric polls for both at a fixed interval.
func runExpiry(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n, spread := max(1, e.size.PromoteJobs/5), e.size.PromoteSpread
	sc.Size = fmt.Sprintf("%d claimed executions over 256 partitions, each timing out (lease or attempt) evenly over %s", n, spread)
	for _, m := range expiryModes {
		stages := newStageRecorder()
		lat, note, err := expiryLateness(ctx, e, m, n, spread, stages)
		if err != nil {
			return fmt.Errorf("%s: %w", m.plugin, err)
		}
		p50, p99, mx := percentiles(lat)
		versus := fmt.Sprintf("FlowFabric %s poll (%s interval; a due item waits up to it)", m.plugin, m.interval)
		sc.Rows = append(sc.Rows,
			Row{Measure: m.name + ", p50", Fabric: p50, Versus: versus, Peer: float64(m.interval.Milliseconds()) / 2, Unit: "ms", Goal: "p99 ≤ 10 ms"},
			Row{Measure: m.name + ", p99", Fabric: p99, Versus: versus, Peer: float64(m.interval.Milliseconds()), Unit: "ms", Goal: "p99 ≤ 10 ms",
				Note: fmt.Sprintf("max %s, %d of %d observed%s", fmtNum(mx, "ms"), len(lat), n, note)})
		sc.Notes = append(sc.Notes, m.plugin+": "+stages.summary()+".")
	}
	sc.Notes = append(sc.Notes, "fabric: due (the score of the claim in lease_expiry or attempt_timeout, server ms) → the scanner's XADD to the execution's lease history (mark_expired's `expired`, ff_expire_execution's `released`), observed through keyspace notifications (Kt, on for this scenario only). FlowFabric's figures are its polling intervals (engine spec §9): a due item waits interval/2 on average and up to the interval, before any scan time.")
	return nil
}

// expiryLateness creates and claims n executions whose timeouts fall over
// spread, runs m's plugin in a host on due-time timers, and returns each
// detection's lateness in ms.
func expiryLateness(ctx context.Context, e *benchEnv, m expiryMode, n int, spread time.Duration, stages *stageRecorder) ([]float64, string, error) {
	db := e.freshDB()
	vc, err := e.dialDB(ctx, db)
	if err != nil {
		return nil, "", err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		return nil, "", err
	}
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return nil, "", err
	}
	dir, err := e.stockPluginDir(ctx, m.plugin)
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)

	// Create the executions first (eligible, one per partition in turn).
	parts := int(cl.Partitions().Flow)
	ids := make([]model.ExecutionID, n)
	t0 := time.Now()
	if err := produce(ctx, n, 8, func(i int) error {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i % parts)}, model.NewUUID())
		ids[i] = id
		_, err := cl.CreateExecution(ctx, sdk.ExecutionSpec{ID: id, Lane: benchLane, Payload: []byte("x")})
		return err
	}); err != nil {
		return nil, "", err
	}
	created := time.Since(t0)

	// Watch lease histories: the detection's XADD names the execution.
	events, stopWatch, err := e.watchKeyspace(ctx, db, "Kt", "*lease:history", "xadd", 4*n+16)
	if err != nil {
		return nil, "", err
	}
	defer stopWatch()

	plugins := map[string]host.PluginConfig{m.plugin: {}}
	h, err := e.startHost(ctx, dir, vc, hostOpts{plugins: plugins, observer: stages})
	if err != nil {
		return nil, "", err
	}
	defer stopHost(h)

	stages.start() // only detections act: the claims' wake-ups find nothing due
	// Claim in due order; each claim's timeout falls at its due time.
	lead := time.Second + 2*created
	base := time.Now().Add(lead)
	var skipped atomic.Int64
	err = produce(ctx, n, 8, func(i int) error {
		id := ids[i]
		at := base.Add(time.Duration(int64(spread) * int64(i) / int64(n)))
		ttl := time.Until(at)
		if ttl < 50*time.Millisecond {
			skipped.Add(1) // claimed too late to time out in the window
			return nil
		}
		grant := (&fcall.IssueClaimGrantParams{ExecutionID: id, WorkerID: "bench", WorkerInstanceID: "bench-expiry",
			Lane: benchLane, GrantTTLMs: 5000}).Call()
		claim := &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: "bench", WorkerInstanceID: "bench-expiry", LaneID: benchLane}
		m.claim(claim, ttl)
		res := vc.FCallBatch(ctx, []valkey.Call{grant, claim.Call()})
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("claim %s: %w", id, r.Err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	// The exact due times: the claims' scores.
	due := make(map[string]int64, n)
	cmds := make(vk.Commands, 0, n)
	for _, id := range ids {
		cmds = append(cmds, vc.Raw().B().Zscore().Key(m.index(model.KeysOn(id.Partition()))).Member(string(id)).Build())
	}
	for i, r := range vc.Raw().DoMulti(ctx, cmds...) {
		if s, err := r.AsFloat64(); err == nil {
			due[model.KeysFor(ids[i]).LeaseHistory()] = int64(s)
		}
	}
	note := fmt.Sprintf("; claims done %s before the first due time", time.Until(base).Round(time.Millisecond))
	if late := time.Since(base); late > 0 {
		note = fmt.Sprintf("; claiming ran %s past the first due time (%d claimed too late were left out)", late.Round(time.Millisecond), skipped.Load())
	}
	var lat []float64
	seen := make(map[string]bool, n)
	deadline := time.After(time.Until(base) + spread + 15*time.Second)
	for len(lat) < len(due) {
		select {
		case ev := <-events:
			// A claim's own XADD (acquired) comes at least 50 ms before
			// its due time; a detection never before it (5 ms of slack
			// for the server's and the bench's clocks).
			d, ok := due[ev.key]
			if ok && !seen[ev.key] && ev.at.UnixMilli() >= d-5 {
				seen[ev.key] = true
				lat = append(lat, float64(ev.at.UnixMicro()-d*1000)/1000)
			}
		case <-deadline:
			return lat, note + "; capped", nil
		case <-ctx.Done():
			return lat, note + "; capped", nil
		}
	}
	return lat, note, nil
}
