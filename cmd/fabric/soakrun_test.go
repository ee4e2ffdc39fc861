package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/internal/testbackend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// soakLanes are the lanes of the soak's work.
var soakLanes = []string{"soak-a", "soak-b", "soak-c", "soak-d", "soak-e", "soak-f", "soak-g", "soak-h"}

// The soak's work kinds: every kind of the demo workload.
const (
	soakPlain   = "soak.plain"
	soakRetry   = "soak.retry"
	soakDelayed = "soak.delayed"
	soakSuspend = "soak.suspend"
	soakFlow    = "soak.flow" // a diamond: root → (left, right) → join
)

// soakWork submits the soak's work and handles it.
type soakWork struct {
	client  *sdk.Client
	isTrans func(error) bool

	mu    sync.Mutex
	ids   []model.ExecutionID
	kinds map[string]int

	next    atomic.Int64
	runs    atomic.Int64
	parked  sync.Map
	signals chan *sdk.Suspension
}

func (w *soakWork) created() []model.ExecutionID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ids)
}

func (w *soakWork) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ids)
}

func (w *soakWork) track(kind string, ids ...model.ExecutionID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids = append(w.ids, ids...)
	w.kinds[kind] += len(ids)
}

// retry runs op until it succeeds or fails for good: a transient error
// (the server restarting) is waited out for up to a minute. No fault
// lands while work is submitted, so a retried create never doubles one
// whose answer was lost.
func (w *soakWork) retry(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := op()
		if err == nil || !w.isTrans(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond) // the server is restarting
	}
}

// submitUntil creates work items, four at a time, until at least target
// executions exist. Item i's kind follows i: half plain, and a tenth each
// retried, delayed, suspended and flows.
func (w *soakWork) submitUntil(ctx context.Context, target int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.count() < target && ctx.Err() == nil {
				i := int(w.next.Add(1) - 1)
				if err := w.submit(ctx, i); err != nil {
					errs <- fmt.Errorf("item %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs, ctx.Err())
}

func (w *soakWork) submit(ctx context.Context, i int) error {
	spec := sdk.ExecutionSpec{Lane: soakLanes[i%len(soakLanes)], Kind: soakPlain, Payload: []byte(fmt.Sprint(i))}
	switch i % 10 {
	case 1:
		spec.Kind = soakRetry
		spec.Policy = &sdk.Policy{MaxRetries: 2, Backoff: sdk.ExponentialBackoff(100*time.Millisecond, time.Second, 2)}
	case 3:
		spec.Kind, spec.Delay = soakDelayed, time.Duration(100+rand.IntN(400))*time.Millisecond
	case 5:
		spec.Kind = soakSuspend
	case 7:
		return w.submitFlow(ctx, spec.Lane, i)
	}
	var id model.ExecutionID
	if err := w.retry(ctx, func() (err error) { id, err = w.client.CreateExecution(ctx, spec); return err }); err != nil {
		return fmt.Errorf("create %s: %w", spec.Kind, err)
	}
	w.track(spec.Kind, id)
	return nil
}

// submitFlow creates a diamond flow of four members.
func (w *soakWork) submitFlow(ctx context.Context, lane string, i int) error {
	var f *sdk.Flow
	if err := w.retry(ctx, func() (err error) { f, err = w.client.CreateFlow(ctx, "soak.diamond"); return err }); err != nil {
		return fmt.Errorf("create flow: %w", err)
	}
	add := func(step string, after ...model.ExecutionID) (model.ExecutionID, error) {
		spec := sdk.ExecutionSpec{Lane: lane, Kind: soakFlow, Payload: []byte(fmt.Sprintf("%d/%s", i, step))}
		var id model.ExecutionID
		err := w.retry(ctx, func() (err error) { id, err = f.Add(ctx, spec, after...); return err })
		if id != "" {
			w.track(soakFlow, id)
		}
		if err != nil {
			return "", fmt.Errorf("add flow member %s: %w", step, err)
		}
		return id, nil
	}
	return addDiamond(add)
}

// handle is the soak's handler: 5–50 ms of work, then a retried item fails its first attempt,
// a delayed one parks itself once more (sdk.DelayFor), a suspended one
// waits for the "approve" signal deliverSignals sends.
func (w *soakWork) handle(ctx context.Context, j *sdk.Job) error {
	w.runs.Add(1)
	// A little work, so that faults find leases held.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(5+rand.IntN(45)) * time.Millisecond):
	}
	switch j.Kind {
	case soakRetry:
		if j.Attempt == 0 {
			return errors.New("first attempt fails on purpose")
		}
	case soakDelayed:
		if _, again := w.parked.LoadOrStore(j.ID, true); !again {
			return sdk.DelayFor(100 * time.Millisecond)
		}
	case soakSuspend:
		if j.AttemptType == "resumed" {
			return nil
		}
		// The timeout resumes it too: a suspension whose answer a server
		// kill lost has no token for deliverSignals to use.
		// A suspend the server's restart refused is tried again: the
		// handler's error would fail the execution, which has no retries.
		var s *sdk.Suspension
		err := w.retry(ctx, func() (err error) {
			s, err = j.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: 30 * time.Second,
				TimeoutBehavior: "auto_resume_with_timeout_signal"})
			return err
		})
		if err != nil {
			return err
		}
		if !s.AlreadySatisfied {
			w.signals <- s
		}
	}
	return nil
}

// deliverSignals approves each suspension after a short pause, until ctx
// ends; it returns once every delivery it began has.
func (w *soakWork) deliverSignals(ctx context.Context, t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-w.signals:
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(50+rand.IntN(200)) * time.Millisecond):
				}
				err := w.retry(ctx, func() error {
					_, err := w.client.DeliverSignal(ctx, s.ExecutionID, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token,
						Name: "approve", IdempotencyKey: s.WaitpointID})
					return err
				})
				if err != nil && ctx.Err() == nil {
					t.Logf("deliver signal to %s: %v", s.ExecutionID, err)
				}
			}()
		}
	}
}

// soakWorker is one in-process SDK worker; crash cancels its life, as a
// crash would (nothing handed back).
type soakWorker struct {
	w     *sdk.Worker
	crash context.CancelFunc
	done  chan struct{}
}

// soakRun is one backend's soak in progress.
type soakRun struct {
	t      *testing.T
	ctx    context.Context
	tg     *soakTarget
	n      int
	hosts  []*soakHost
	logDir string
	work   *soakWork
	start  time.Time

	wmu     sync.Mutex
	workers []*soakWorker
	spawned int

	pending  []model.ExecutionID // created, not yet seen terminal
	terminal int
	inFlight []int // at each fault
}

func newSoakRun(t *testing.T, ctx context.Context, tg *soakTarget, n int, hosts []*soakHost, logDir string) *soakRun {
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: tg.provider, Creator: "soak", Logger: testbackend.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w := &soakWork{client: client, isTrans: tg.provider.Driver().IsTransient, kinds: map[string]int{},
		signals: make(chan *sdk.Suspension, n)}
	r := &soakRun{t: t, ctx: ctx, tg: tg, n: n, hosts: hosts, logDir: logDir, work: w, start: time.Now()}
	for range 4 {
		r.startWorker()
	}
	sig, stop := context.WithCancel(ctx)
	delivered := make(chan struct{})
	go func() { defer close(delivered); w.deliverSignals(sig, t) }()
	t.Cleanup(func() { stop(); <-delivered })
	return r
}

func (r *soakRun) startWorker() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	life, crash := context.WithCancel(r.ctx)
	r.spawned++
	wk, err := sdk.Connect(life, r.tg.provider, sdk.WorkerConfig{WorkerID: "soak", InstanceID: fmt.Sprintf("soak-%d", r.spawned),
		Lanes: soakLanes, Concurrency: 8, LeaseTTL: 2 * time.Second, Logger: testbackend.Logger()})
	if err != nil {
		crash()
		r.t.Fatalf("connect worker: %v", err)
	}
	sw := &soakWorker{w: wk, crash: crash, done: make(chan struct{})}
	go func() { defer close(sw.done); _ = wk.Run(life, r.work.handle) }()
	r.workers = append(r.workers, sw)
}

// crashWorker crashes the worker running the most handlers (their
// leases are left to expire and be reclaimed), waiting up to 10 s for one
// to run any, and starts a replacement; it returns how many handlers the
// victim was running.
func (r *soakRun) crashWorker() int64 {
	r.wmu.Lock()
	v, running := 0, int64(-1)
	for deadline := time.Now().Add(10 * time.Second); running <= 0 && time.Now().Before(deadline); {
		if running == 0 {
			time.Sleep(5 * time.Millisecond) // no handler runs: look again
		}
		for i, w := range r.workers {
			if n := w.w.Stats().InFlight; n > running {
				v, running = i, n
			}
		}
	}
	victim := r.workers[v]
	r.workers = slices.Delete(r.workers, v, v+1)
	r.wmu.Unlock()
	victim.crash()
	<-victim.done
	r.startWorker()
	return running
}

func (r *soakRun) stopWorkers() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	for _, w := range r.workers {
		w.crash()
		<-w.done
	}
	r.workers = nil
}

// poll reads the phase of every execution not yet seen terminal and
// returns how many are in flight, by phase.
func (r *soakRun) poll() (int, map[string]int) {
	r.t.Helper()
	created := r.work.created()
	r.pending = append(r.pending, created[r.terminal+len(r.pending):]...)
	phases, err := r.tg.phases(r.ctx, r.pending)
	if err != nil {
		r.tg.describe(r.t, r.pending)
		r.t.Fatalf("read phases of %d executions in flight after %s: %v; hosts' logs in %s",
			len(r.pending), time.Since(r.start).Round(time.Second), err, r.logDir)
	}
	by := map[string]int{}
	left := r.pending[:0]
	for i, id := range r.pending {
		if phases[i] == model.PhaseTerminal {
			r.terminal++
			continue
		}
		by[cmp.Or(phases[i], "missing")]++
		left = append(left, id)
	}
	r.pending = left
	return len(left), by
}

// waitInFlight polls until at most max executions are in flight, and
// returns the count and its phases; it fails the test after ctx ends.
func (r *soakRun) waitInFlight(max int) (int, map[string]int) {
	r.t.Helper()
	for {
		in, by := r.poll()
		if in <= max {
			return in, by
		}
		select {
		case <-r.ctx.Done():
			r.tg.describe(r.t, r.pending)
			r.t.Fatalf("soak: %d executions still in flight (%v) after %s; hosts' logs in %s",
				in, by, time.Since(r.start).Round(time.Second), r.logDir)
		case <-time.After(200 * time.Millisecond): // a read of every pending execution
		}
	}
}

// run submits the work in waves, landing one fault per wave once a
// quarter of what is in flight has ended, then waits for every execution
// to end.
func (r *soakRun) run() {
	t := r.t
	plan := soakPlan()
	wave := (r.n + len(plan)) / (len(plan) + 1)
	var hostKills, workerCrashes, restarts int
	var names []string
	for i, f := range plan {
		if err := r.work.submitUntil(r.ctx, min(r.n, (i+1)*wave)); err != nil {
			t.Fatalf("submit: %v", err)
		}
		in, _ := r.poll()
		in, by := r.waitInFlight(in * 3 / 4)
		var what string
		switch f {
		case "host":
			h := hostKills % len(r.hosts)
			r.hosts[h].kill9()
			r.hosts[h].start()
			hostKills++
			what = fmt.Sprintf("host %d kill -9", h)
		case "worker":
			workerCrashes++
			what = fmt.Sprintf("worker crash (running %d handlers)", r.crashWorker())
		case "server":
			sf := r.tg.restarts[restarts]
			if err := sf.restart(r.ctx); err != nil {
				t.Fatalf("server %s: %v", sf.name, err)
			}
			restarts++
			what, names = "server "+sf.name, append(names, sf.name)
		}
		t.Logf("%s: fault %d/%d, %s: %d executions in flight %v (%d created, %d ended)",
			time.Since(r.start).Round(time.Millisecond), i+1, len(plan), what, in, by, r.work.count(), r.terminal)
		if in == 0 {
			t.Errorf("fault %d (%s) landed with no execution in flight", i+1, what)
		}
		r.inFlight = append(r.inFlight, in)
	}
	if err := r.work.submitUntil(r.ctx, r.n); err != nil {
		t.Fatalf("submit: %v", err)
	}
	r.waitInFlight(0)
	elapsed := time.Since(r.start)
	t.Logf("soak %s: %d executions (%s) in %s (%.0f/s) through %d host kill -9s, %d worker crashes, %d server restarts (%s); in flight at the faults: %s; %d handler runs",
		r.tg.name, r.work.count(), r.kindLine(), elapsed.Round(time.Millisecond), float64(r.work.count())/elapsed.Seconds(),
		hostKills, workerCrashes, restarts, strings.Join(names, ", "), intsLine(r.inFlight), r.work.runs.Load())
	for _, k := range []string{soakPlain, soakRetry, soakDelayed, soakSuspend, soakFlow} {
		if r.work.kinds[k] == 0 {
			t.Errorf("no %s execution was submitted", k)
		}
	}
}

func (r *soakRun) kindLine() string {
	r.work.mu.Lock()
	defer r.work.mu.Unlock()
	var s []string
	for _, k := range []string{soakPlain, soakRetry, soakDelayed, soakSuspend, soakFlow} {
		s = append(s, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "soak."), r.work.kinds[k]))
	}
	return strings.Join(s, " ")
}

func intsLine(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}
