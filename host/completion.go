package host

import (
	"context"
	"time"

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
	// cmd/fabric feeds it from postgres.Client.CompletionWakeups
	// (LISTEN fabric_completion). The host sweeps the PushScanners on each
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
