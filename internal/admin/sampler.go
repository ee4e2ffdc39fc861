package admin

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/internal/census"
	"github.com/fabric-host/fabric/internal/startstop"
)

// SamplerConfig configures a Sampler. Zero fields take the defaults of
// defaults.go.
type SamplerConfig struct {
	// Backend is the Valkey deployment read by census.Take, unless Take
	// is set. One of Backend and Take is required.
	Backend *valkey.Client
	// Take reads one census (default census.Take on Backend); PGCensus
	// for a Postgres deployment.
	Take func(ctx context.Context) (*census.Census, error)
	// Interval is the time between two censuses (default 2 s).
	Interval time.Duration
	// Timeout bounds one census (default 5 s).
	Timeout time.Duration
	// Logger receives failures (default slog.Default()).
	Logger *slog.Logger
}

// Sampler takes a keyspace census (executions by state, due-index lag) on
// an interval and keeps the latest, with the terminal throughput between
// the last two.
//
// # Notes
//
//   - Start returns at once; the first census runs immediately. Stop
//     blocks until the loop ended.
//   - Safe for concurrent use.
type Sampler struct {
	startstop.Base
	cfg SamplerConfig

	mu         sync.Mutex
	last       *census.Census
	throughput float64
	err        error
	taken      chan struct{}     // closed and replaced after every census
	history    []ThroughputPoint // the last throughputHistory readings (console_throughput.go)
}

// NewSampler validates cfg and fills its defaults; neither a Backend nor
// a Take is a wiring mistake and panics.
func NewSampler(cfg SamplerConfig) *Sampler {
	if cfg.Take == nil && cfg.Backend != nil {
		c := cfg.Backend
		cfg.Take = func(ctx context.Context) (*census.Census, error) { return census.Take(ctx, c) }
	}
	if cfg.Take == nil {
		panic("admin: SamplerConfig.Backend or Take is required")
	}
	cfg.Interval = cmp.Or(cfg.Interval, SamplerIntervalDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, SamplerTimeoutDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sampler{cfg: cfg, taken: make(chan struct{})}
}

// Start runs the census loop until Stop or ctx ends.
func (s *Sampler) Start(ctx context.Context) error {
	ctx, ok, started, stopped := s.StartInit(ctx)
	if !ok {
		return nil
	}
	go func() {
		defer stopped()
		started()
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			s.Sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Sample takes one census now and records it (or its error).
func (s *Sampler) Sample(ctx context.Context) {
	cctx, cancel := context.WithTimeoutCause(ctx, s.cfg.Timeout, fmt.Errorf("admin.sampler.census: timed out after %s", s.cfg.Timeout))
	c, err := s.cfg.Take(cctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.cfg.Logger.Warn("census failed; the live view shows no execution counts until it answers", "error", err)
		}
		s.err = err
	} else {
		if s.last != nil {
			if dt := c.At.Sub(s.last.At).Seconds(); dt > 0 {
				s.throughput = max(0, float64(c.Executions["terminal"]-s.last.Executions["terminal"])/dt)
				s.record(c.At, s.throughput)
			}
		}
		s.last, s.err = c, nil
	}
	close(s.taken)
	s.taken = make(chan struct{})
}

// Latest returns the last good census (nil before the first), the
// terminal throughput (executions per second) between the last two, and
// the error of the latest attempt, if it failed.
func (s *Sampler) Latest() (*census.Census, float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.throughput, s.err
}

// Taken returns a channel closed after the next census attempt.
func (s *Sampler) Taken() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken
}
