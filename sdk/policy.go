package sdk

import (
	"encoding/json"
	"math"
	"time"
)

// Backoff is a retry backoff strategy. Build one with FixedBackoff or
// ExponentialBackoff; the zero value means the library default (1 s).
type Backoff struct {
	exponential bool
	set         bool
	delay       time.Duration // fixed
	initial     time.Duration // exponential
	max         time.Duration
	multiplier  float64
}

// FixedBackoff waits d before every retry.
func FixedBackoff(d time.Duration) Backoff { return Backoff{set: true, delay: d} }

// ExponentialBackoff waits min(initial·multiplier^n, max) before retry n
// (n counts from 0), which is how the library computes it.
func ExponentialBackoff(initial, max time.Duration, multiplier float64) Backoff {
	return Backoff{set: true, exponential: true, initial: initial, max: max, multiplier: multiplier}
}

// Policy is an execution's retry, timeout and routing policy, stored with
// the execution as FlowFabric's ExecutionPolicy JSON document.
type Policy struct {
	// MaxRetries is how many retries follow a failed attempt (0: none).
	MaxRetries int
	// Backoff spaces retries; the zero value is the library's 1 s.
	Backoff Backoff
	// AttemptTimeout bounds one attempt (0: none). It is enforced by the
	// attempt-timeout scanner from the claim on.
	AttemptTimeout time.Duration
	// Deadline is an absolute deadline for the whole execution (zero:
	// none), enforced by the execution-deadline scanner; one already past
	// is refused at create (backend.ErrInvalidInput).
	Deadline time.Time
	// MaxReclaims caps lease-expiry reclaims (0: FlowFabric's 100).
	MaxReclaims int
	// RequiredCapabilities must all be advertised by a worker that claims
	// the execution.
	RequiredCapabilities []string
}

func (p *Policy) validate() error {
	if p == nil {
		return nil
	}
	if p.MaxRetries < 0 || p.MaxRetries > math.MaxUint32 {
		return invalid("policy.max_retries", "%d is out of range 0..%d", p.MaxRetries, uint32(math.MaxUint32))
	}
	if p.MaxReclaims < 0 || p.MaxReclaims > math.MaxUint32 {
		return invalid("policy.max_reclaims", "%d is out of range", p.MaxReclaims)
	}
	if p.AttemptTimeout < 0 {
		return invalid("policy.attempt_timeout", "must not be negative (got %s)", p.AttemptTimeout)
	}
	if p.AttemptTimeout > 0 && p.AttemptTimeout < time.Millisecond {
		return invalid("policy.attempt_timeout", "must be at least 1ms (got %s)", p.AttemptTimeout)
	}
	b := p.Backoff
	if b.set {
		if b.exponential {
			if b.initial <= 0 || b.max < b.initial {
				return invalid("policy.backoff", "exponential needs 0 < initial <= max (got %s, %s)", b.initial, b.max)
			}
			if !(b.multiplier >= 1) || math.IsInf(b.multiplier, 0) {
				return invalid("policy.backoff", "multiplier must be a finite number >= 1 (got %v)", b.multiplier)
			}
		} else if b.delay < 0 {
			return invalid("policy.backoff", "fixed delay must not be negative (got %s)", b.delay)
		}
	}
	return validateCapabilities("policy.required_capabilities", p.RequiredCapabilities)
}

// Wire shape of FlowFabric's ExecutionPolicy (crates/ff-core policy.rs).
// Optional members are omitted rather than sent as null: the library's
// Lua tests fields against nil, and cjson decodes null to a non-nil value.
type wirePolicy struct {
	Priority               int                `json:"priority"`
	DelayUntil             *int64             `json:"delay_until,omitempty"`
	RetryPolicy            *wireRetryPolicy   `json:"retry_policy,omitempty"`
	TimeoutPolicy          *wireTimeoutPolicy `json:"timeout_policy,omitempty"`
	MaxReclaimCount        uint32             `json:"max_reclaim_count"`
	MaxReplayCount         uint32             `json:"max_replay_count"`
	BudgetIDs              []string           `json:"budget_ids"`
	RoutingRequirements    *wireRouting       `json:"routing_requirements,omitempty"`
	MaxSignalsPerExecution uint32             `json:"max_signals_per_execution"`
}

type wireRetryPolicy struct {
	MaxRetries          uint32      `json:"max_retries"`
	Backoff             wireBackoff `json:"backoff"`
	RetryableCategories []string    `json:"retryable_categories"`
}

type wireBackoff struct {
	Type           string   `json:"type"`
	DelayMs        *int64   `json:"delay_ms,omitempty"`
	InitialDelayMs *int64   `json:"initial_delay_ms,omitempty"`
	MaxDelayMs     *int64   `json:"max_delay_ms,omitempty"`
	Multiplier     *float64 `json:"multiplier,omitempty"`
	Jitter         *bool    `json:"jitter,omitempty"`
}

type wireTimeoutPolicy struct {
	AttemptTimeoutMs    *int64 `json:"attempt_timeout_ms,omitempty"`
	ExecutionDeadlineMs *int64 `json:"execution_deadline_ms,omitempty"`
	MaxReclaimCount     uint32 `json:"max_reclaim_count"`
}

type wireRouting struct {
	RequiredCapabilities []string `json:"required_capabilities"`
}

func i64p(v int64) *int64 { return &v }

// policyJSON renders the ExecutionPolicy document for a validated spec.
func policyJSON(priority int, delayUntilMs int64, p *Policy) string {
	w := wirePolicy{Priority: priority, MaxReclaimCount: 100, MaxReplayCount: 10,
		BudgetIDs: []string{}, MaxSignalsPerExecution: 10000}
	if delayUntilMs > 0 {
		w.DelayUntil = i64p(delayUntilMs)
	}
	if p != nil {
		if p.MaxReclaims > 0 {
			w.MaxReclaimCount = uint32(p.MaxReclaims)
		}
		if p.MaxRetries > 0 || p.Backoff.set {
			rp := &wireRetryPolicy{MaxRetries: uint32(p.MaxRetries), RetryableCategories: []string{}}
			switch b := p.Backoff; {
			case b.exponential:
				f, j := false, b.multiplier
				rp.Backoff = wireBackoff{Type: "exponential", InitialDelayMs: i64p(b.initial.Milliseconds()),
					MaxDelayMs: i64p(b.max.Milliseconds()), Multiplier: &j, Jitter: &f}
			case b.set:
				rp.Backoff = wireBackoff{Type: "fixed", DelayMs: i64p(b.delay.Milliseconds())}
			default:
				rp.Backoff = wireBackoff{Type: "fixed", DelayMs: i64p(1000)}
			}
			w.RetryPolicy = rp
		}
		if p.AttemptTimeout > 0 || !p.Deadline.IsZero() {
			tp := &wireTimeoutPolicy{MaxReclaimCount: w.MaxReclaimCount}
			if p.AttemptTimeout > 0 {
				tp.AttemptTimeoutMs = i64p(p.AttemptTimeout.Milliseconds())
			}
			if !p.Deadline.IsZero() {
				tp.ExecutionDeadlineMs = i64p(p.Deadline.UnixMilli())
			}
			w.TimeoutPolicy = tp
		}
		if len(p.RequiredCapabilities) > 0 {
			w.RoutingRequirements = &wireRouting{RequiredCapabilities: append([]string(nil), p.RequiredCapabilities...)}
		}
	}
	b, _ := json.Marshal(w) // plain structs always marshal
	return string(b)
}
