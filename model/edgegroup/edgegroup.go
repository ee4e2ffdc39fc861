// Package edgegroup is the decision of a flow's edge group, written once
// for every caller: its policy (all_of, any_of, quorum), its upstream
// counters and what they say about the downstream. Postgres's dependency
// dispatch runs it in a plugin (pdk/pgflow) and natively
// (backend/postgres), so it lives below both.
package edgegroup

import "github.com/fabric-host/fabric/model"

// Policy kinds of ff_edge_group.policy.
const (
	KindAllOf  = "all_of"
	KindAnyOf  = "any_of"
	KindQuorum = "quorum"
)

// OnSatisfiedLetRun is the on_satisfied value that keeps the remaining
// siblings running; any other value cancels them.
const OnSatisfiedLetRun = "let_run"

// Policy is a decoded edge-group policy.
type Policy struct {
	// Kind is all_of, any_of or quorum; anything else decodes as all_of.
	Kind string
	// K is the quorum size (quorum only).
	K int64
	// CancelRemaining cancels the unfinished siblings once satisfied
	// (any_of and quorum only).
	CancelRemaining bool
}

// DecodePolicy decodes the policy columns EdgeGroupLock returns.
func DecodePolicy(kind string, k int64, onSatisfied string) Policy {
	switch kind {
	case KindAnyOf, KindQuorum:
		return Policy{Kind: kind, K: k, CancelRemaining: onSatisfied != OnSatisfiedLetRun}
	}
	return Policy{Kind: KindAllOf}
}

// Counters are an edge group's upstream counts.
type Counters struct {
	Success, Fail, Skip, Running int64
}

// Bucket is a completion outcome's counter: success, skip, or fail for
// every other outcome (failed, cancelled, expired...).
type Bucket int

// Buckets.
const (
	BucketSuccess Bucket = iota
	BucketFail
	BucketSkip
)

// BucketOf maps a completion outcome to its counter.
func BucketOf(outcome string) Bucket {
	switch outcome {
	case model.OutcomeSuccess:
		return BucketSuccess
	case model.OutcomeSkipped:
		return BucketSkip
	}
	return BucketFail
}

// Advance moves one upstream from running to b.
func (c Counters) Advance(b Bucket) Counters {
	if c.Running > 0 {
		c.Running--
	}
	switch b {
	case BucketSuccess:
		c.Success++
	case BucketSkip:
		c.Skip++
	default:
		c.Fail++
	}
	return c
}

// Decision is what a group's counters say about its downstream.
type Decision int

// Decisions.
const (
	Pending Decision = iota
	Satisfied
	Impossible
)

// Evaluate decides a group (upstream's evaluate).
func Evaluate(p Policy, c Counters) Decision {
	total := c.Success + c.Fail + c.Skip + max(c.Running, 0)
	nonSuccess := c.Fail + c.Skip
	switch p.Kind {
	case KindAnyOf:
		switch {
		case c.Success >= 1:
			return Satisfied
		case total > 0 && nonSuccess >= total:
			return Impossible
		}
	case KindQuorum:
		switch {
		case c.Success >= p.K:
			return Satisfied
		case total-nonSuccess < p.K:
			return Impossible
		}
	default:
		switch {
		case total > 0 && c.Success == total:
			return Satisfied
		case nonSuccess > 0:
			return Impossible
		}
	}
	return Pending
}
