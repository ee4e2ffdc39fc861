package host

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/startstop"
	"github.com/fabric-host/fabric/model"
)

// completionService is the completion dispatch service. On Valkey it
// holds the completion listener (a dedicated connection SUBSCRIBEd to
// ff:dag:completions, each valid message queued) and the driver that
// hands the queue to the dispatchers; on Postgres it sweeps the
// partitions that CompletionConfig.Wakeups names. Stop ends both.
type completionService struct {
	startstop.Base

	cfg CompletionConfig
	// backend is the Valkey deployment subscribed on (nil: the Wakeups
	// path).
	backend Backend
	logger  *slog.Logger
	// clock dates each message's receipt (Config.Clock).
	clock Clock
	// drive hands queued completions to the dispatchers until ctx ends
	// (Host.drive).
	drive func(ctx context.Context, queue <-chan queuedCompletion)
	// resync sweeps the Resync scanners, after every resubscription
	// (Host.resync).
	resync func(ctx context.Context)
	// push sweeps the partitions named on in until ctx ends or in closes
	// (Host.pushSweeps).
	push func(ctx context.Context, in <-chan model.Partition)
}

// newCompletionService is the host's completion dispatch service, nil
// when completions are off (or there is nothing to listen to).
func (h *Host) newCompletionService() *completionService {
	cfg := h.cfg.Completions
	if !cfg.Enabled || h.cfg.Backend == nil && cfg.Wakeups == nil {
		return nil
	}
	return &completionService{cfg: cfg, backend: h.cfg.Backend, logger: h.cfg.Logger, clock: h.cfg.Clock,
		drive: h.drive, resync: h.resync, push: h.pushSweeps}
}

// queuedCompletion is one valid completion message on its way from the
// listener to the driver, with when it was received (the start of its
// dispatch's StageHandOff).
type queuedCompletion struct {
	abi.Completion
	Received time.Time
}

// Start starts the listener and the driver (or the wake-up sweeps) and
// returns at once.
func (s *completionService) Start(ctx context.Context) error {
	ctx, ok, started, stopped := s.StartInit(ctx)
	if !ok {
		return nil
	}
	var wg sync.WaitGroup
	if s.backend == nil {
		wg.Go(func() { s.push(ctx, s.cfg.Wakeups) })
	} else {
		queue := make(chan queuedCompletion, s.cfg.QueueSize)
		resyncs := make(chan struct{}, 1)
		wg.Go(func() { s.listen(ctx, queue, resyncs) })
		wg.Go(func() { s.resyncOnRequest(ctx, resyncs) })
		wg.Go(func() { s.drive(ctx, queue) })
	}
	go func() {
		defer stopped()
		started()
		wg.Wait()
	}()
	return nil
}

// listen keeps one subscription alive until ctx ends: it subscribes on a
// dedicated connection, pushes every valid message to queue, and on
// connection loss resubscribes at once (after RetryDelay when subscribing
// itself failed). Every resubscription asks resyncOnRequest for a resync
// sweep.
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
func (s *completionService) listen(ctx context.Context, queue chan<- queuedCompletion, resyncs chan<- struct{}) {
	log := s.logger
	subs := 0
	for ctx.Err() == nil {
		subscribed, err := s.subscribeOnce(ctx, queue, func() {
			subs++
			if subs > 1 {
				log.Info("completion listener resubscribed", "channel", abi.CompletionsChannel, "subscriptions", subs)
				select { // one request pending at most: a sweep after the latest gap
				case resyncs <- struct{}{}:
				default:
				}
			} else {
				log.Info("completion listener subscribed", "channel", abi.CompletionsChannel)
			}
			if s := s.cfg.Signals; s != nil {
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
		log.Warn("completion listener could not subscribe; retrying", "error", err, "retry_ms", s.cfg.RetryDelay.Milliseconds())
		if !sleep(ctx, s.cfg.RetryDelay) {
			return
		}
	}
}

// resyncOnRequest sweeps the Resync scanners once per request until ctx
// ends; requests made while a sweep runs coalesce into one more sweep, so
// the gap of the latest resubscription is always swept after it, and Stop
// waits for a sweep in progress.
func (s *completionService) resyncOnRequest(ctx context.Context, requests <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-requests:
			s.resync(ctx)
		}
	}
}

// subscribeOnce holds one dedicated connection until it breaks or ctx
// ends; it reports whether the SUBSCRIBE was confirmed.
func (s *completionService) subscribeOnce(ctx context.Context, queue chan<- queuedCompletion, onSubscribed func()) (bool, error) {
	return s.backend.SubscribeChannel(ctx, abi.CompletionsChannel, ListenerClientName, func(msg string) {
		received := s.clock.Now()
		c, ok := s.parseCompletion(msg)
		if !ok {
			return
		}
		select { // a full queue blocks this connection: backpressure
		case queue <- queuedCompletion{Completion: c, Received: received}:
		case <-ctx.Done():
		}
	}, onSubscribed)
}

// parseCompletion decodes one message as FlowFabric's subscriber does:
// JSON with a valid execution id and a UUID flow id; anything else is
// dropped with a warning.
func (s *completionService) parseCompletion(msg string) (abi.Completion, bool) {
	var c abi.Completion
	if err := json.Unmarshal([]byte(msg), &c); err != nil {
		s.logger.Warn("completion listener: bad JSON dropped", "error", err, "message", truncate(msg, 256))
		return c, false
	}
	if _, err := model.ParseExecutionID(c.ExecutionID); err != nil {
		s.logger.Warn("completion listener: bad execution_id dropped", "execution_id", c.ExecutionID)
		return c, false
	}
	if _, err := model.ParseUUID(c.FlowID); err != nil {
		s.logger.Warn("completion listener: bad flow_id dropped", "execution_id", c.ExecutionID, "flow_id", c.FlowID)
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
