package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// promoteMode is one way of running the delayed promoter.
type promoteMode struct {
	name string
	// timers configures the host's due-time timers.
	timers host.TimerConfig
}

// runPromotion measures due→eligible lateness of delayed executions
// spread over the flow partitions with due times spread evenly over
// PromoteSpread: fabric's delayed promoter plugin polling at its fixed
// interval, fabric's due-time timers, and asynq's forwarder (its 5 s
// default check interval) on the same server.
func runPromotion(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n, spread := e.size.PromoteJobs, e.size.PromoteSpread
	sc.Size = fmt.Sprintf("%d delayed executions over 256 partitions, due evenly over %s", n, spread)
	pr, perr := e.peer(ctx, "asynq-delay", "-socket", e.vsrv.Socket(), "-db", strconv.Itoa(e.freshDB()), "-jobs", strconv.Itoa(n),
		"-spread", spread.String(), "-check-interval", e.size.AsynqCheck.String(), "-timeout", (spread + 30*time.Second).String())
	peer := func(p50 bool) (string, float64) {
		if perr != nil {
			return "asynq (failed)", nan()
		}
		if p50 {
			return fmt.Sprintf("asynq %s forwarder (%s poll)", pr.Version, e.size.AsynqCheck), pr.P50Ms
		}
		return fmt.Sprintf("asynq %s forwarder (%s poll)", pr.Version, e.size.AsynqCheck), pr.P99Ms
	}
	modes := []promoteMode{
		{name: "due-time timers (default)"},
		{name: "fixed polling (750 ms interval)", timers: host.TimerConfig{Disabled: true}},
	}
	for _, m := range modes {
		stages := newStageRecorder()
		lat, note, err := promotionLateness(ctx, e, m, stages)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if !m.timers.Disabled {
			sc.Notes = append(sc.Notes, m.name+": "+stages.summary()+".")
		}
		p50, p99, mx := percentiles(lat)
		v50, pp50 := peer(true)
		v99, pp99 := peer(false)
		goal := "p99 ≤ 10 ms"
		if m.timers.Disabled {
			goal = "(FlowFabric's polling)"
		}
		sc.Rows = append(sc.Rows,
			Row{Measure: m.name + ": due → eligible, p50", Fabric: p50, Versus: v50, Peer: pp50, Unit: "ms", Goal: goal},
			Row{Measure: m.name + ": due → eligible, p99", Fabric: p99, Versus: v99, Peer: pp99, Unit: "ms", Goal: goal,
				Note: fmt.Sprintf("max %s, %d of %d observed%s", fmtNum(mx, "ms"), len(lat), n, note)})
	}
	if err := pgPromotionRows(ctx, e, sc); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if perr != nil {
		sc.Notes = append(sc.Notes, "asynq failed: "+perr.Error())
	} else {
		sc.Notes = append(sc.Notes, fmt.Sprintf("asynq: due → handler start (the forwarder moves due tasks from its scheduled set to the queue, then a worker dequeues), %d of %d observed, max %s. asynq scores its scheduled set in whole seconds, so a task can also run up to 1 s early (negative lateness).", pr.Jobs, n, fmtNum(pr.MaxMs, "ms")))
	}
	sc.Notes = append(sc.Notes, "fabric: due (delay_until) → the ZADD of the execution into its eligible index, observed through keyspace notifications (notify-keyspace-events Kz, on for this scenario only); no workers run, so eligible means ready to claim.")
	return nil
}

// promotionLateness creates the delayed executions, runs the promoter in
// a host, and returns each execution's lateness in ms.
func promotionLateness(ctx context.Context, e *benchEnv, m promoteMode, stages *stageRecorder) ([]float64, string, error) {
	n, spread := e.size.PromoteJobs, e.size.PromoteSpread
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
	dir, err := e.stockPluginDir(ctx, "delayed_promoter")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)

	// Watch eligible indexes: every ZADD is one promotion.
	events, stopWatch, err := e.watchKeyspace(ctx, db, "Kz", "ff:idx:*:lane:"+benchLane+":eligible", "zadd", n+16)
	if err != nil {
		return nil, "", err
	}
	defer stopWatch()
	subCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	subscribed := make(chan struct{})
	var once sync.Once
	go func() {
		// Receive has no subscribed hook: confirm with a probe ZADD.
		probe := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 0}).LaneEligible(benchLane)
		for try := 0; subCtx.Err() == nil; try++ {
			// A new score each time: a ZADD that changes nothing is silent.
			_ = vc.Raw().Do(subCtx, vc.Raw().B().Zadd().Key(probe).ScoreMember().ScoreMember(float64(try), "probe").Build()).Error()
			select {
			case ev := <-events:
				if ev.key == probe {
					_ = vc.Raw().Do(subCtx, vc.Raw().B().Zrem().Key(probe).Member("probe").Build()).Error()
					once.Do(func() { close(subscribed) })
					return
				}
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		return nil, "", fmt.Errorf("keyspace subscription never confirmed")
	}
	for len(events) > 0 {
		<-events
	}

	// The promoter runs while the executions are created, as in
	// production (with timers, each new delayed entry wakes its partition).
	plugins := map[string]host.PluginConfig{"delayed_promoter": {Config: map[string]string{"lanes": benchLane}}}
	h, err := e.startHost(ctx, dir, vc, hostOpts{plugins: plugins, timers: m.timers, observer: stages})
	if err != nil {
		return nil, "", err
	}
	defer stopHost(h)

	// Create the executions in due order, round-robin over partitions, so
	// within a partition eligible-index order is due order.
	due, base, note, err := createDelayedBurst(ctx, cl, n, int(cl.Partitions().Flow), 200, 500*time.Millisecond, spread,
		func(id model.ExecutionID) string { return string(id) })
	if err != nil {
		return nil, "", err
	}

	stages.start() // the due window: creation's wake-ups are not promotions
	var lat []float64
	deadline := time.After(time.Until(base) + spread + 15*time.Second)
	for len(lat) < n {
		select {
		case ev := <-events:
			r2, err := vc.Raw().Do(ctx, vc.Raw().B().Zpopmin().Key(ev.key).Count(1).Build()).AsZScores()
			if err != nil || len(r2) == 0 {
				continue
			}
			if d, ok := due[r2[0].Member]; ok {
				lat = append(lat, float64(ev.at.UnixMicro()-d.UnixMilli()*1000)/1000)
			}
		case <-deadline:
			return lat, note + "; capped", nil
		case <-ctx.Done():
			return lat, note + "; capped", nil
		}
	}
	return lat, note, nil
}

// createDelayedBurst creates n delayed executions of benchLane with cl,
// round-robin over the first parts flow partitions, their due times
// spread evenly over spread from a base far enough ahead that each is
// created before it is due (lead plus twice the time of creating them
// all, measured on calib creates first: one created late would count
// its creation as lateness). It returns each execution's due time by
// key(id), the base, and a note on how far ahead of it creating ended.
func createDelayedBurst(ctx context.Context, cl *sdk.Client, n, parts, calib int, lead, spread time.Duration,
	key func(model.ExecutionID) string) (map[string]time.Time, time.Time, string, error) {
	t0 := time.Now()
	if err := produce(ctx, calib, 8, func(int) error {
		_, err := cl.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "calib", Payload: []byte("x"), Delay: time.Hour})
		return err
	}); err != nil {
		return nil, time.Time{}, "", err
	}
	perItem := time.Since(t0) / time.Duration(calib)
	base := time.Now().Add(lead + 2*time.Duration(n)*perItem).Truncate(time.Millisecond)
	due := make(map[string]time.Time, n)
	var dmu sync.Mutex
	err := produce(ctx, n, 8, func(i int) error {
		at := base.Add(time.Duration(int64(spread) * int64(i) / int64(n)))
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i % parts)}, model.NewUUID())
		dmu.Lock()
		due[key(id)] = at
		dmu.Unlock()
		_, err := cl.CreateExecution(ctx, sdk.ExecutionSpec{ID: id, Lane: benchLane, Payload: []byte("x"), Delay: time.Until(at)})
		return err
	})
	if err != nil {
		return nil, time.Time{}, "", err
	}
	note := fmt.Sprintf("; all created %s before the first due time", time.Until(base).Round(time.Millisecond))
	if late := time.Since(base); late > 0 {
		note = fmt.Sprintf("; creating ran %s past the first due time (those early ones count creation as lateness)", late.Round(time.Millisecond))
	}
	return due, base, note, nil
}
