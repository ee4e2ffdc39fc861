package hostfn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/fabric-host/fabric/abi"
)

// Bounds of the metrics a plugin reports (pdk Host.Metric). A metric
// outside them is dropped: counted in Stats.MetricsDropped and logged
// once per plugin, never passed on to /metrics.
const (
	// MaxMetricNameBytes bounds a metric name.
	MaxMetricNameBytes = 128
	// MaxMetricsPerPlugin bounds the distinct names one plugin keeps; a
	// new name beyond it is dropped, the ones kept still count.
	MaxMetricsPerPlugin = 256
)

// ValidMetricName returns nil when name may name a plugin metric: 1 to
// MaxMetricNameBytes bytes of ASCII letters, digits, '_', ':', '.' and
// '-' (a Prometheus label value any scraper takes: UTF-8, no quoting
// surprises). The error describes a bad name without repeating it whole.
func ValidMetricName(name string) error {
	if name == "" {
		return errors.New("metric name is empty")
	}
	if len(name) > MaxMetricNameBytes {
		return fmt.Errorf("metric name of %d bytes (%s…) is above %d", len(name), quotePrefix(name), MaxMetricNameBytes)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == ':', c == '.', c == '-':
		default:
			return fmt.Errorf("metric name %s has byte %#02x at %d (want ASCII letters, digits, _ : . -)", quotePrefix(name), c, i)
		}
	}
	return nil
}

// quotePrefix quotes at most 32 bytes of s, for messages.
func quotePrefix(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strconv.Quote(s)
}

func metricFunction() callback {
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		if c.begin(0) != nil {
			return // dropped: the call is over budget
		}
		in, _, err := blockView(ctx, stack[0]) // decoding copies what it keeps
		if err != nil {
			panic(fmt.Sprintf("hostfn metric: abi violation: pointer %#x: %v", stack[0], err))
		}
		// A name above the bound is dropped before it is copied: a plugin
		// sending 1 MiB names every partition made the host allocate
		// gigabytes a second, and the collector's work stalled every
		// plugin's sweeps (bench scenario 11: worst gap 15× the interval).
		var m abi.Metric
		if _, err := abi.DecodeWithin(&m, in, MaxMetricNameBytes); errors.Is(err, abi.ErrDecodeLimit) {
			c.Stats.metricDropped(c, fmt.Errorf("metric name of %d bytes or more is above %d", MaxMetricNameBytes+1, MaxMetricNameBytes))
			return
		} else if err != nil {
			c.Stats.metricDropped(c, fmt.Errorf("malformed metric: %w", err))
			return
		}
		if err := c.Stats.metric(m); err != nil {
			c.Stats.metricDropped(c, err)
		}
	}
}

// metric records m, or says why it is dropped: a bad name, a value that
// is not finite, a kind that is neither counter nor gauge, or a new name
// beyond MaxMetricsPerPlugin.
func (s *Stats) metric(m abi.Metric) error {
	if err := ValidMetricName(m.Name); err != nil {
		return err
	}
	if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
		return fmt.Errorf("metric %s: value %v is not finite", m.Name, m.Value)
	}
	if m.Kind != abi.MetricCounter && m.Kind != abi.MetricGauge {
		return fmt.Errorf("metric %s: kind %d is neither counter nor gauge", m.Name, m.Kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metrics == nil {
		s.metrics, s.gauges = map[string]float64{}, map[string]bool{}
	}
	if _, ok := s.metrics[m.Name]; !ok && len(s.metrics) >= MaxMetricsPerPlugin {
		return fmt.Errorf("metric %s: the plugin already keeps %d metrics", m.Name, MaxMetricsPerPlugin)
	}
	s.gauges[m.Name] = m.Kind == abi.MetricGauge
	if m.Kind == abi.MetricGauge {
		s.metrics[m.Name] = m.Value
	} else {
		s.metrics[m.Name] += m.Value
	}
	return nil
}

// metricDropped counts a dropped metric of c's plugin and logs the first.
func (s *Stats) metricDropped(c *Caller, err error) {
	if s.MetricsDropped.Add(1) == 1 {
		c.Logger.Warn("plugin metric dropped (later ones are counted, not logged)", "plugin", c.Plugin, "error", err)
	}
}
