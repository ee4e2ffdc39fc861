package host

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/testsignal"
	"github.com/fabric-host/fabric/model"
)

// CompletionConfig configures the completion listener and the dispatcher
// driver. The zero value leaves them off.
type CompletionConfig struct {
	// Enabled starts the listener (it needs Config.Backend): a dedicated
	// connection SUBSCRIBEd to ff:dag:completions whose messages are handed
	// to every dispatcher plugin in batches.
	Enabled bool
	// QueueSize bounds the hand-off between the subscriber and the
	// dispatcher driver (default 1024, FlowFabric's capacity). When full,
	// the subscriber blocks (backpressure) rather than dropping.
	QueueSize int
	// MaxBatch caps one dispatch batch (default 256); a dispatcher's own
	// batch_size caps it further.
	MaxBatch int
	// Resync names scanner plugins swept once, immediately, after every
	// resubscription, to repair completions published while disconnected
	// (default ["dependency_reconciler"]; an empty non-nil slice disables).
	Resync []string
	// RetryDelay is the wait before retrying a failed subscribe (default
	// 1 s, FlowFabric's).
	RetryDelay time.Duration
	// Wakeups, on a host without a Valkey Backend (Postgres), pushes the
	// flow partitions whose completion events wait for dispatch;
	// cmd/fabric feeds it from postgres.Client.SubscribeCompletions
	// (LISTEN ff_completion). The host sweeps the PushScanners on each
	// such partition at once instead of waiting for their interval, which
	// stays the safety net for a wake-up lost with the connection.
	Wakeups <-chan model.Partition
	// PushScanners are the scanner plugins a wake-up sweeps (default
	// ["pg_dependency_reconciler"]).
	PushScanners []string
	// Signals receives test signals. Nil in production.
	Signals *CompletionSignals
}

// CompletionSignals are the edges listener tests wait on.
type CompletionSignals struct {
	// Subscribed fires with the subscription count (1 on the first
	// subscribe, 2 after the first reconnect, ...).
	Subscribed testsignal.TestSignal[int]
	// Dispatched fires after every dispatcher call.
	Dispatched testsignal.TestSignal[DispatchRecord]
	// Resynced fires after a post-reconnect resync sweep.
	Resynced testsignal.TestSignal[string]
	// Pushed fires after a wake-up sweep of a partition (Wakeups).
	Pushed testsignal.TestSignal[model.Partition]
}

// Init arms every signal.
func (s *CompletionSignals) Init() {
	s.Subscribed.Init()
	s.Dispatched.Init()
	s.Resynced.Init()
	s.Pushed.Init()
}

func (c CompletionConfig) withDefaults() CompletionConfig {
	if c.QueueSize <= 0 {
		c.QueueSize = 1024
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.Resync == nil {
		c.Resync = []string{"dependency_reconciler"}
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.PushScanners == nil {
		c.PushScanners = []string{"pg_dependency_reconciler"}
	}
	return c
}

// ListenerClientName is the CLIENT SETNAME of the listener's connection.
const ListenerClientName = "fabric:completions"

// completions is the running listener and driver of one Start.
type completions struct {
	wg sync.WaitGroup
}

// startCompletions starts the listener and the driver when enabled. They
// stop with ctx; wait returns once both have.
func (h *Host) startCompletions(ctx context.Context) *completions {
	cc := &completions{}
	cfg := h.cfg.Completions
	if cfg.Enabled && h.cfg.Backend == nil && cfg.Wakeups != nil {
		cc.wg.Add(1)
		go func() {
			defer cc.wg.Done()
			h.pushSweeps(ctx, cfg.Wakeups)
		}()
		return cc
	}
	if !cfg.Enabled || h.cfg.Backend == nil {
		return cc
	}
	queue := make(chan abi.Completion, cfg.QueueSize)
	cc.wg.Add(2)
	go func() {
		defer cc.wg.Done()
		h.listen(ctx, queue)
	}()
	go func() {
		defer cc.wg.Done()
		h.drive(ctx, queue)
	}()
	return cc
}

func (c *completions) wait() { c.wg.Wait() }

// listen keeps one subscription alive until ctx ends: it subscribes on a
// dedicated connection, pushes every valid message to queue, and on
// connection loss resubscribes at once (after RetryDelay when subscribing
// itself failed).
//
// # Notes
//
//   - Pub/Sub does not buffer: a completion published between the loss of
//     the connection and the next SUBSCRIBE reply is never delivered (the
//     gap window, typically one reconnect round trip). After every
//     resubscription the Resync scanners are swept at once, and
//     dependency_reconciler's own 15 s sweep repairs whatever remains.
//   - The same gap exists when a dispatcher call fails or the plugin is
//     quarantined: those completions are logged and left to the
//     reconcilers.
func (h *Host) listen(ctx context.Context, queue chan<- abi.Completion) {
	log := h.cfg.Logger
	subs := 0
	for ctx.Err() == nil {
		subscribed, err := h.subscribeOnce(ctx, queue, func() {
			subs++
			if subs > 1 {
				log.Info("completion listener resubscribed", "channel", abi.CompletionsChannel, "subscriptions", subs)
				go h.resync(ctx)
			} else {
				log.Info("completion listener subscribed", "channel", abi.CompletionsChannel)
			}
			if s := h.cfg.Completions.Signals; s != nil {
				s.Subscribed.Signal(subs)
			}
		})
		if ctx.Err() != nil {
			return
		}
		if subscribed {
			log.Warn("completion listener lost its connection; resubscribing", "error", err)
			continue
		}
		log.Warn("completion listener could not subscribe; retrying", "error", err, "retry_ms", h.cfg.Completions.RetryDelay.Milliseconds())
		if !sleep(ctx, h.cfg.Completions.RetryDelay) {
			return
		}
	}
}

// subscribeOnce holds one dedicated connection until it breaks or ctx
// ends; it reports whether the SUBSCRIBE was confirmed.
func (h *Host) subscribeOnce(ctx context.Context, queue chan<- abi.Completion, onSubscribed func()) (bool, error) {
	client := h.cfg.Backend.Raw()
	dc, release := client.Dedicate()
	defer release()
	// Named so operators (and tests) can tell it from other subscribers.
	if err := dc.Do(ctx, dc.B().ClientSetname().ConnectionName(ListenerClientName).Build()).Error(); err != nil {
		dc.Close()
		return false, err
	}
	var once sync.Once
	confirmed := make(chan struct{})
	broken := dc.SetPubSubHooks(valkeygo.PubSubHooks{
		OnMessage: func(m valkeygo.PubSubMessage) {
			c, ok := h.parseCompletion(m)
			if !ok {
				return
			}
			select { // a full queue blocks this connection: backpressure
			case queue <- c:
			case <-ctx.Done():
			}
		},
		OnSubscription: func(s valkeygo.PubSubSubscription) {
			if s.Kind == "subscribe" && s.Channel == abi.CompletionsChannel {
				once.Do(func() { close(confirmed) })
			}
		},
	})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(abi.CompletionsChannel).Build()).Error(); err != nil {
		dc.Close()
		return false, err
	}
	select {
	case <-confirmed:
	case err := <-broken:
		return false, err
	case <-ctx.Done():
		dc.Close()
		return false, nil
	}
	onSubscribed()
	select {
	case err := <-broken:
		if err == nil {
			err = errors.New("subscription ended")
		}
		return true, err
	case <-ctx.Done():
		dc.Close()
		return true, nil
	}
}

// parseCompletion decodes one message as FlowFabric's subscriber does:
// JSON with a valid execution id and a UUID flow id; anything else is
// dropped with a warning.
func (h *Host) parseCompletion(m valkeygo.PubSubMessage) (abi.Completion, bool) {
	if m.Channel != abi.CompletionsChannel {
		return abi.Completion{}, false
	}
	var c abi.Completion
	if err := json.Unmarshal([]byte(m.Message), &c); err != nil {
		h.cfg.Logger.Warn("completion listener: bad JSON dropped", "error", err, "message", truncate(m.Message, 256))
		return c, false
	}
	if _, err := model.ParseExecutionID(c.ExecutionID); err != nil {
		h.cfg.Logger.Warn("completion listener: bad execution_id dropped", "execution_id", c.ExecutionID)
		return c, false
	}
	if _, err := model.ParseUUID(c.FlowID); err != nil {
		h.cfg.Logger.Warn("completion listener: bad flow_id dropped", "execution_id", c.ExecutionID, "flow_id", c.FlowID)
		return c, false
	}
	return c, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// pushSweeps sweeps the PushScanners on every partition a wake-up names,
// until ctx ends or in closes. Wake-ups queued while a sweep runs are
// coalesced: one sweep of a partition dispatches every event waiting on
// it.
func (h *Host) pushSweeps(ctx context.Context, in <-chan model.Partition) {
	pending := map[model.Partition]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case p, ok := <-in:
			if !ok {
				return
			}
			pending[p] = true
		}
	more:
		for {
			select {
			case p, ok := <-in:
				if !ok {
					break more
				}
				pending[p] = true
			default:
				break more
			}
		}
		for p := range pending {
			delete(pending, p)
			for _, name := range h.cfg.Completions.PushScanners {
				h.mu.Lock()
				pl := h.plugins[name]
				h.mu.Unlock()
				// Only a running scanner: not one disabled, off its
				// backend or quarantined.
				if pl == nil || pl.status().State != StateRunning {
					continue
				}
				man := pl.mod.Load().Manifest()
				if man.Kind != abi.KindScanner || man.PartitionFamily() != p.Family || int(p.Index) >= pl.spec().Partitions {
					continue
				}
				pl.scanPartition(ctx, 0, int(p.Index))
			}
			if s := h.cfg.Completions.Signals; s != nil {
				s.Pushed.Signal(p)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// resync sweeps the Resync scanners once, partition by partition, outside
// their own cadence.
func (h *Host) resync(ctx context.Context) {
	for _, name := range h.cfg.Completions.Resync {
		h.mu.Lock()
		p := h.plugins[name]
		h.mu.Unlock()
		if p == nil || p.mod.Load().Manifest().Kind != abi.KindScanner {
			continue
		}
		spec := p.spec()
		for i := 0; i < spec.Partitions && ctx.Err() == nil; i++ {
			if _, fault, _ := p.scanPartition(ctx, 0, i); fault {
				break
			}
		}
		h.cfg.Logger.Info("completion listener: resync sweep done", "plugin", name)
		if s := h.cfg.Completions.Signals; s != nil {
			s.Resynced.Signal(name)
		}
	}
}
