package admin

import (
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/internal/census"
)

// PluginSource is what metrics and the admin server read from a host;
// *host.Host implements it.
type PluginSource interface {
	Plugins() []host.PluginStatus
	Started() <-chan struct{}
}

// Metrics is the Prometheus registry of one host. It is the host's
// Observer (sweep durations) and reads everything else at scrape time
// from the host's plugin snapshots and the sampler's latest census.
//
// Series (plugin counters restart from zero when a plugin is unloaded and
// loaded again, which Prometheus reads as a counter reset):
//
//	fabric_plugin_cycle_duration_seconds{plugin}       histogram of sweep durations, one per sweep (on timers: an interval's passes together)
//	fabric_timer_stage_seconds{plugin,stage}           histogram of each stage of an acting scan on due-time timers (host.StageEvent): wake or timer, queue, call, fcall
//	fabric_dispatch_stage_seconds{plugin,stage}        histogram of each stage of a dispatcher call on completions that sent an FCALL batch (host.DispatchRecord): handoff, call, fcall, return
//	fabric_plugin_cycles_total{plugin}                 sweeps started
//	fabric_plugin_calls_total{plugin}                  partition calls
//	fabric_plugin_items_total{plugin,outcome}          scanned, acted, skipped
//	fabric_plugin_errors_total{plugin}                 item errors the plugin reported
//	fabric_plugin_quarantines_total{plugin}            faults (trap, timeout, bad output), each a quarantine
//	fabric_plugin_quarantined{plugin}                  1 while quarantined
//	fabric_plugin_host_calls_total{plugin}             host-function calls
//	fabric_plugin_host_calls_refused_total{plugin}     host-function calls refused (capability, budget)
//	fabric_plugin_swaps_total{plugin}                  hot swaps
//	fabric_plugin_info{plugin,version,state}           1 per loaded plugin
//	fabric_plugin_lag_seconds{plugin}                  age of the oldest due item of its indexes it will act on
//	fabric_plugin_waiting{plugin,cause}                due items it is done with, waiting on cause (e.g. reclaim)
//	fabric_plugin_waiting_oldest_seconds{plugin,cause} age of the oldest of those
//	fabric_plugin_faults_total{plugin,kind}            faults by kind (trap, plugin error, timeout, over memory, over output, over budget, bad output)
//	fabric_plugin_commands_total{plugin}               backend commands of its host calls
//	fabric_plugin_over_budget_total{plugin}            host calls refused for its budget
//	fabric_plugin_memory_cap_bytes{plugin}             memory cap it runs under
//	fabric_plugin_instances{plugin}                    instances it holds, warm or in a call (0: released idle)
//	fabric_plugin_idle_releases_total{plugin}          instances released after idling (host.Config.IdleRelease)
//	fabric_plugin_rejected{file,reason}                1 per file the host refused to load
//	fabric_plugin_shadow_actions_total{plugin,outcome} a shadow's actions: agree, only_live, only_candidate
//	fabric_plugin_shadow_calls_total{plugin,outcome}   a shadow's calls: agreeing, differing, skipped, fault
//	fabric_plugin_shadow_agree_ratio{plugin}           agree / (agree + disagree) of the shadow (1: none acted)
//	fabric_plugin_guest_counter_total{plugin,name}     the plugin's own counters (pdk Host.Metric)
//	fabric_plugin_guest_gauge{plugin,name}             the plugin's own gauges (pdk Host.Metric)
//	fabric_executions{state}                           executions by lane index
//	fabric_executions_terminal_per_second              terminal throughput
//	fabric_backend_up                                  1 when the last census succeeded
//
// # Notes
//
//   - Safe for concurrent use. Attach may be called after the host was
//     built with the Metrics as its Observer.
type Metrics struct {
	reg      *prometheus.Registry
	cycle    *prometheus.HistogramVec
	stages   *prometheus.HistogramVec
	dispatch *prometheus.HistogramVec

	mu      sync.Mutex
	src     PluginSource
	sampler *Sampler
	// skipped counts series a scrape left out because a label value was
	// not valid (not UTF-8): the other series are still served.
	skipped atomic.Int64
}

var (
	descCycles     = prometheus.NewDesc("fabric_plugin_cycles_total", "Sweeps started by the plugin's loop.", []string{"plugin"}, nil)
	descCalls      = prometheus.NewDesc("fabric_plugin_calls_total", "Partition calls made to the plugin.", []string{"plugin"}, nil)
	descItems      = prometheus.NewDesc("fabric_plugin_items_total", "Items the plugin scanned, acted on or skipped.", []string{"plugin", "outcome"}, nil)
	descErrors     = prometheus.NewDesc("fabric_plugin_errors_total", "Item errors the plugin reported.", []string{"plugin"}, nil)
	descQuarantine = prometheus.NewDesc("fabric_plugin_quarantines_total", "Plugin faults (trap, timeout, bad output); each quarantines the plugin.", []string{"plugin"}, nil)
	descQuarNow    = prometheus.NewDesc("fabric_plugin_quarantined", "1 while the plugin is quarantined.", []string{"plugin"}, nil)
	descHostCalls  = prometheus.NewDesc("fabric_plugin_host_calls_total", "Host-function calls made by the plugin.", []string{"plugin"}, nil)
	descRefused    = prometheus.NewDesc("fabric_plugin_host_calls_refused_total", "Host-function calls refused (capability not granted, budget).", []string{"plugin"}, nil)
	descSwaps      = prometheus.NewDesc("fabric_plugin_swaps_total", "Hot swaps of the plugin.", []string{"plugin"}, nil)
	descInfo       = prometheus.NewDesc("fabric_plugin_info", "1 per loaded plugin, labelled with its version and state.", []string{"plugin", "version", "state"}, nil)
	descFaults     = prometheus.NewDesc("fabric_plugin_faults_total", "Plugin faults by kind: trap, plugin error, timeout, over memory, over output, over budget, bad output.", []string{"plugin", "kind"}, nil)
	descCommands   = prometheus.NewDesc("fabric_plugin_commands_total", "Backend commands carried by the plugin's host calls.", []string{"plugin"}, nil)
	descOverBudget = prometheus.NewDesc("fabric_plugin_over_budget_total", "Host calls refused because the plugin spent its budget.", []string{"plugin"}, nil)
	descMemCap     = prometheus.NewDesc("fabric_plugin_memory_cap_bytes", "The memory cap the plugin runs under, after the operator's ceiling.", []string{"plugin"}, nil)
	descInstances  = prometheus.NewDesc("fabric_plugin_instances", "Instances the plugin's serving version holds, warm in its pool or in a call; 0 once released idle (its next call instantiates afresh).", []string{"plugin"}, nil)
	descIdleRel    = prometheus.NewDesc("fabric_plugin_idle_releases_total", "Instances of the plugin released after idling (host.Config.IdleRelease), their memory and resident machine code given back.", []string{"plugin"}, nil)
	descRejected   = prometheus.NewDesc("fabric_plugin_rejected", "1 per plugin file the host refused to load, with the reason.", []string{"file", "reason"}, nil)
	descLag        = prometheus.NewDesc("fabric_plugin_lag_seconds", "How long ago the oldest item of the plugin's due indexes that the plugin will act on became due (0: none due).", []string{"plugin"}, nil)
	descWaiting    = prometheus.NewDesc("fabric_plugin_waiting", "Due items of the plugin's indexes it has already handled, waiting on something outside it (cause), at most 16 per partition.", []string{"plugin", "cause"}, nil)
	descWaitOldest = prometheus.NewDesc("fabric_plugin_waiting_oldest_seconds", "How long ago the oldest waiting item became due.", []string{"plugin", "cause"}, nil)
	descExecs      = prometheus.NewDesc("fabric_executions", "Executions by state (lane index).", []string{"state"}, nil)
	descThroughput = prometheus.NewDesc("fabric_executions_terminal_per_second", "Executions reaching a terminal state per second, between the last two censuses.", nil, nil)
	descUp         = prometheus.NewDesc("fabric_backend_up", "1 when the last keyspace census succeeded.", nil, nil)
	descShadowActs = prometheus.NewDesc("fabric_plugin_shadow_actions_total", "Actions of the plugin's shadow (a candidate version) compared with the live version's: agree, only_live, only_candidate.", []string{"plugin", "outcome"}, nil)
	descShadowCall = prometheus.NewDesc("fabric_plugin_shadow_calls_total", "Calls of the plugin's shadow: agreeing, differing, skipped (no time left or the live call faulted), fault.", []string{"plugin", "outcome"}, nil)
	descShadowOK   = prometheus.NewDesc("fabric_plugin_shadow_agree_ratio", "Agreeing actions over all compared actions of the plugin's shadow (1 while none acted).", []string{"plugin"}, nil)
	descGuestCount = prometheus.NewDesc("fabric_plugin_guest_counter_total", "A counter the plugin keeps itself (pdk Host.Metric), by name.", []string{"plugin", "name"}, nil)
	descGuestGauge = prometheus.NewDesc("fabric_plugin_guest_gauge", "A gauge the plugin sets itself (pdk Host.Metric), by name.", []string{"plugin", "name"}, nil)
	descGuestDrop  = prometheus.NewDesc("fabric_plugin_guest_metrics_dropped_total", "Metrics the plugin reported that the host dropped: a name that is not 1-128 bytes of ASCII letters, digits, _ : . -, a value that is not finite, or a new name beyond 256.", []string{"plugin"}, nil)
	descLogDrop    = prometheus.NewDesc("fabric_plugin_log_dropped_bytes_total", "Bytes of the plugin's log lines dropped over its log budget (each line's message and attributes).", []string{"plugin"}, nil)
	descSkipped    = prometheus.NewDesc("fabric_metrics_series_skipped_total", "Series scrapes left out because a label value was not valid UTF-8 (the other series are served).", nil, nil)
)

// NewMetrics returns a registry with fabric's series plus the Go runtime
// and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		cycle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fabric_plugin_cycle_duration_seconds",
			Help:    "Duration of one sweep of the plugin over its partitions, one observation per sweep (as fabric_plugin_cycles_total counts them); for a plugin on due-time timers, the time its passes over due and woken partitions took in one interval, together.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14), // 0.5 ms .. ~75 s
		}, []string{"plugin"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fabric_timer_stage_seconds",
			Help:    "Where a due item's lateness goes, per acting partition scan on due-time timers, by stage: wake (notification received → the loop took the partition) or timer (its timer due → taken), queue (taken → plugin call started), call (call started → FCALL sent), fcall (FCALL sent → replies in).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17), // 0.1 ms .. ~6.6 s
		}, []string{"plugin", "stage"}),
		dispatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fabric_dispatch_stage_seconds",
			Help:    "Where a completion's time to its children goes, per dispatcher call that sent an FCALL batch, by stage: handoff (completion message received → dispatcher call started), call (call started → first FCALL batch sent: instance, guest, its reads), fcall (FCALL sent → replies in), return (replies in → call returned).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18), // 50 µs .. ~6.6 s
		}, []string{"plugin", "stage"}),
	}
	m.reg.MustRegister(m.cycle, m.stages, m.dispatch, (*snapshotCollector)(m),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Attach makes scrapes read src's plugins and s's census (either may be
// nil).
func (m *Metrics) Attach(src PluginSource, s *Sampler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.src, m.sampler = src, s
}

// SweepDone implements host.Observer.
func (m *Metrics) SweepDone(ev host.SweepEvent) {
	m.cycle.WithLabelValues(ev.Plugin).Observe(ev.Duration.Seconds())
}

// StageDone implements host.StageObserver.
func (m *Metrics) StageDone(ev host.StageEvent) {
	for _, st := range ev.Stages() {
		m.stages.WithLabelValues(ev.Plugin, st.Stage).Observe(st.Duration.Seconds())
	}
}

// DispatchDone implements host.DispatchObserver.
func (m *Metrics) DispatchDone(rec host.DispatchRecord) {
	for _, st := range rec.Stages() {
		m.dispatch.WithLabelValues(rec.Plugin, st.Stage).Observe(st.Duration.Seconds())
	}
}

// Registry returns the registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// snapshotCollector turns snapshots into const metrics at scrape time.
type snapshotCollector Metrics

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCycles, descCalls, descItems, descErrors, descQuarantine, descQuarNow,
		descHostCalls, descRefused, descSwaps, descInfo, descLag, descWaiting, descWaitOldest, descExecs, descThroughput, descUp,
		descFaults, descCommands, descOverBudget, descMemCap, descInstances, descIdleRel, descRejected, descGuestCount, descGuestGauge,
		descGuestDrop, descLogDrop, descSkipped, descShadowActs, descShadowCall, descShadowOK} {
		ch <- d
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src, s := c.src, c.sampler
	c.mu.Unlock()
	// emit sends a series unless a label value is invalid: one bad label
	// (a file name that is not UTF-8...) must not fail the whole scrape.
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err != nil {
			c.skipped.Add(1)
			return
		}
		ch <- m
	}
	defer func() { emit(descSkipped, prometheus.CounterValue, float64(c.skipped.Load())) }()
	var cen *census.Census
	var tput float64
	if s != nil {
		var err error
		cen, tput, err = s.Latest()
		emit(descUp, prometheus.GaugeValue, boolFloat(err == nil && cen != nil))
	}
	if src != nil {
		counter := func(d *prometheus.Desc, v float64, labels ...string) {
			emit(d, prometheus.CounterValue, v, labels...)
		}
		for _, p := range src.Plugins() {
			counter(descCycles, float64(p.Cycles), p.Name)
			counter(descCalls, float64(p.Calls), p.Name)
			counter(descItems, float64(p.Totals.Scanned), p.Name, "scanned")
			counter(descItems, float64(p.Totals.Acted), p.Name, "acted")
			counter(descItems, float64(p.Totals.Skipped), p.Name, "skipped")
			counter(descErrors, float64(p.Totals.Errors), p.Name)
			counter(descQuarantine, float64(p.Faults), p.Name)
			counter(descHostCalls, float64(p.HostCalls), p.Name)
			counter(descRefused, float64(p.Denied), p.Name)
			counter(descSwaps, float64(p.Swaps), p.Name)
			counter(descCommands, float64(p.Commands), p.Name)
			counter(descOverBudget, float64(p.OverBudget), p.Name)
			if sh := p.Shadow; sh != nil {
				counter(descShadowActs, float64(sh.Agree), p.Name, "agree")
				counter(descShadowActs, float64(sh.OnlyLive), p.Name, "only_live")
				counter(descShadowActs, float64(sh.OnlyCandidate), p.Name, "only_candidate")
				counter(descShadowCall, float64(sh.AgreeingCalls), p.Name, "agreeing")
				counter(descShadowCall, float64(sh.Calls-sh.AgreeingCalls), p.Name, "differing")
				counter(descShadowCall, float64(sh.Skipped), p.Name, "skipped")
				counter(descShadowCall, float64(sh.Faults), p.Name, "fault")
				emit(descShadowOK, prometheus.GaugeValue, sh.AgreeRatio(), p.Name)
			}
			for kind, n := range p.FaultKinds {
				counter(descFaults, float64(n), p.Name, kind)
			}
			counter(descGuestDrop, float64(p.MetricsDropped), p.Name)
			counter(descLogDrop, float64(p.LogBytesDropped), p.Name)
			for name, v := range p.Metrics {
				if hostfn.ValidMetricName(name) != nil {
					continue // the host drops these; a status from elsewhere may not
				}
				if slices.Contains(p.MetricGauges, name) {
					emit(descGuestGauge, prometheus.GaugeValue, v, p.Name, name)
				} else {
					counter(descGuestCount, v, p.Name, name)
				}
			}
			if p.Limits != nil {
				emit(descMemCap, prometheus.GaugeValue, float64(int64(p.Limits.MaxPages)<<16), p.Name)
			}
			emit(descInstances, prometheus.GaugeValue, float64(p.Instances), p.Name)
			counter(descIdleRel, float64(p.IdleReleases), p.Name)
			emit(descQuarNow, prometheus.GaugeValue, boolFloat(p.State == host.StateQuarantined), p.Name)
			emit(descInfo, prometheus.GaugeValue, 1, p.Name, p.Version, string(p.State))
			if cen != nil {
				if lag, ok := cen.LagMs[p.Name]; ok {
					emit(descLag, prometheus.GaugeValue, float64(lag)/1000, p.Name)
				}
				if w, ok := cen.Waiting[p.Name]; ok {
					emit(descWaiting, prometheus.GaugeValue, float64(w.Count), p.Name, w.Cause)
					emit(descWaitOldest, prometheus.GaugeValue, float64(w.OldestMs)/1000, p.Name, w.Cause)
				}
			}
		}
	}
	if rs, ok := src.(RejectedSource); ok && src != nil {
		for _, f := range rs.Rejected() {
			emit(descRejected, prometheus.GaugeValue, 1, filepath.Base(f.Path), f.Reason)
		}
	}
	if cen != nil {
		for _, st := range census.States {
			emit(descExecs, prometheus.GaugeValue, float64(cen.Executions[st]), st)
		}
		emit(descThroughput, prometheus.GaugeValue, tput)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
