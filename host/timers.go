package host

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// TimerConfig configures due-time timers: a due-index scanner reports the
// earliest due score it saw (abi.ScanResult.NextDueMs), the host sleeps
// that partition until then, and a ZADD to one of the plugin's wake
// indexes (manifest config abi.ConfigWake) wakes the partition at once.
// Polling stays as the safety net. The zero value runs timers.
//
// # Notes
//
//   - Wake-ups come from Valkey keyspace notifications (keyevent "zadd"
//     on the backend's database), so the host turns on the E and z flags
//     of notify-keyspace-events at start unless NoConfigSet is set (then
//     the operator must).
//   - While the notification subscription is down, partitions are polled
//     at the plugin's interval, as without timers; while it is up, a
//     partition with nothing known due is polled every SafetyInterval.
type TimerConfig struct {
	// Disabled turns timers off: every scanner sweeps all partitions every
	// interval (FlowFabric's fixed polling).
	Disabled bool
	// SafetyFactor: with the subscription up, a partition with nothing
	// known due is polled every SafetyFactor × the plugin's interval
	// (default 10).
	SafetyFactor int
	// NoConfigSet: do not CONFIG SET notify-keyspace-events.
	NoConfigSet bool
	// Calls is how many calls of one plugin its scan loop keeps in flight
	// at once, each on its own due partitions (default
	// TimerCallsDefault), and at most the instances the plugin keeps warm
	// (Config.PoolSize): a call beyond them would instantiate and start a
	// fresh guest on the due path, tens of milliseconds, and drop it
	// after. A burst of due work is spread over them rather than queued
	// behind one call; a plugin that scans a batch of partitions together
	// (pdk.DueBatch) acts on all of a call's due partitions in one
	// pipelined batch.
	Calls int
}

// TimerCallsDefault is TimerConfig.Calls's default (capped by the warm
// instances, Config.PoolSize).
const TimerCallsDefault = 2

// TimerSafetyFactorDefault is TimerConfig.SafetyFactor's default.
const TimerSafetyFactorDefault = 10

// timerRetryDelay is the pause before the notification subscription is
// retried after it fails.
const timerRetryDelay = time.Second

// wakeState is a plugin's share of the timers: the partitions woken since
// its loop last looked, and a channel that nudges the loop.
type wakeState struct {
	mu    sync.Mutex
	woken map[int]time.Time // partition → when its first wake since the last take arrived
	// keys are the index keys whose writes woke each partition (see
	// probeWakes); a partition woken for no key (a gain, a resubscribe)
	// is in blind.
	keys     map[int][]string
	blind    map[int]bool
	all      time.Time // when a wake of every partition arrived (zero: none)
	ch       chan struct{}
	patterns []string

	serverMs atomic.Int64 // last server time the plugin read
	hostAt   atomic.Int64 // host clock (unix ns) when it read it
}

func newWakeState(m abi.Manifest) *wakeState {
	w := &wakeState{woken: map[int]time.Time{}, keys: map[int][]string{}, blind: map[int]bool{}, ch: make(chan struct{}, 1)}
	w.setPatterns(m)
	return w
}

func (w *wakeState) setPatterns(m abi.Manifest) {
	var pats []string
	for _, p := range strings.Split(m.Config[abi.ConfigWake], ",") {
		if p = strings.TrimSpace(p); p != "" {
			pats = append(pats, p)
		}
	}
	w.mu.Lock()
	w.patterns = pats
	w.mu.Unlock()
}

func (w *wakeState) timed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.patterns) > 0
}

func (w *wakeState) matches(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.patterns {
		if ok, _ := path.Match(p, key); ok {
			return true
		}
	}
	return false
}

// wake marks partition i (or every partition when i < 0) woken at at by
// a write to key ("": unknown) and nudges the loop.
func (w *wakeState) wake(i int, key string, at time.Time) {
	w.mu.Lock()
	if i < 0 {
		if w.all.IsZero() {
			w.all = at
		}
	} else {
		if _, ok := w.woken[i]; !ok {
			w.woken[i] = at
		}
		if key == "" {
			w.blind[i] = true
		} else if !slices.Contains(w.keys[i], key) {
			w.keys[i] = append(w.keys[i], key)
		}
	}
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// take returns and clears the woken partitions: out[i] is when partition
// i was first woken since the last take (zero: not woken); keys[i] the
// index keys that woke it, when they alone did (else it has no entry).
// With none woken (a burst of due work has no wake-ups) both are nil: the
// loop takes once per pass, and a slice of every partition each time was
// most of what a pass allocated.
func (w *wakeState) take(n int) (out []time.Time, keys map[int][]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.woken) == 0 && w.all.IsZero() {
		return nil, nil
	}
	out = make([]time.Time, n)
	keys = map[int][]string{}
	for i, at := range w.woken {
		if i < n {
			out[i] = at
			if !w.blind[i] && w.all.IsZero() {
				keys[i] = w.keys[i]
			}
		}
	}
	if !w.all.IsZero() {
		for i := range out {
			if out[i].IsZero() || w.all.Before(out[i]) {
				out[i] = w.all
			}
		}
	}
	clear(w.woken)
	clear(w.keys)
	clear(w.blind)
	w.all = time.Time{}
	return out, keys
}

// sawServerTime records a server-time read of the plugin.
func (w *wakeState) sawServerTime(ms int64, at time.Time) {
	w.serverMs.Store(ms)
	w.hostAt.Store(at.UnixNano())
}

// dueAt converts a server due time into host clock time, using the last
// server-time read as the offset.
func (w *wakeState) dueAt(dueMs int64) (time.Time, bool) {
	ms, at := w.serverMs.Load(), w.hostAt.Load()
	if ms == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, at).Add(time.Duration(dueMs-ms) * time.Millisecond), true
}

// newWakeListener is the host's wake service (nil with timers off): it
// routes zadd keyevents to the plugins' wake patterns.
func (h *Host) newWakeListener() *wakeListener {
	if !h.timersOn() {
		return nil
	}
	return &wakeListener{src: h.cfg.Backend, configSet: !h.cfg.Timers.NoConfigSet, retry: timerRetryDelay,
		logger: h.cfg.Logger, route: h.routeWake, resumed: h.wakeAll}
}

// routeWake wakes the partition named by key's hash tag in every plugin
// whose wake patterns match key.
func (h *Host) routeWake(key string) {
	tag := abi.HashTag(key) // "{fp:7}"
	_, num, ok := strings.Cut(strings.Trim(tag, "{}"), ":")
	if !ok {
		return
	}
	i, err := strconv.Atoi(num)
	if err != nil {
		return
	}
	at := h.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.plugins {
		if p.wake != nil && p.wake.matches(key) {
			p.wake.wake(i, key, at)
		}
	}
}

func (h *Host) wakeAll() {
	at := h.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.plugins {
		if p.wake != nil {
			p.wake.wake(-1, "", at)
		}
	}
}

// timersOn reports whether this host runs due-time timers: on unless
// disabled, and only with a Valkey backend to subscribe to.
func (h *Host) timersOn() bool { return !h.cfg.Timers.Disabled && h.cfg.Backend != nil }

// pluginConfig is the host's per-plugin config: the deployment's budget
// and quota partition counts (abi.ConfigBudgetPartitions and
// abi.ConfigQuotaPartitions, so a plugin locating budgets or quotas from
// another family routes like the host; an operator entry wins), plus the
// key telling due-index scanners to report their next due time when
// timers run.
func (h *Host) pluginConfig(name string) PluginConfig {
	pc := h.cfg.Plugins[name]
	cfg := make(map[string]string, len(pc.Config)+3)
	cfg[abi.ConfigBudgetPartitions] = strconv.Itoa(int(h.cfg.Partitions.Budget))
	cfg[abi.ConfigQuotaPartitions] = strconv.Itoa(int(h.cfg.Partitions.Quota))
	for k, v := range pc.Config {
		cfg[k] = v
	}
	if h.timersOn() {
		cfg[abi.ConfigNextDue] = "1"
	}
	pc.Config = cfg
	return pc
}
