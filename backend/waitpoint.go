package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// WaitpointDriver is the part of ControlDriver that creates a waitpoint
// before the attempt suspends (FlowFabric's pending waitpoint): its id
// and token can be handed out first, and signals delivered to it before
// the suspend are buffered (EffectBuffered) and counted by a
// SuspendExecution with PendingWaitpointID. A pending waitpoint the
// attempt never suspends on is closed once ExpiresAt passed (Valkey's
// pending_wp_expiry scanner, Postgres's pg_pending_wp_expiry reconciler).
type WaitpointDriver interface {
	// CreatePendingWaitpoint creates a pending waitpoint of the fenced
	// attempt and returns it with its token. A fence that no longer
	// holds the lease is ErrLeaseGone; a waitpoint id already open is
	// ErrInvalidInput.
	CreatePendingWaitpoint(ctx context.Context, p *CreatePendingWaitpointParams) (*Waitpoint, error)
}

// EffectBuffered is DeliverSignalResult.Effect of a signal delivered to a
// pending waitpoint: recorded, and evaluated when the attempt suspends on
// the waitpoint.
const EffectBuffered = "buffered_for_pending_waitpoint"

// Waitpoint is a bound waitpoint: its id, its external key and the HMAC
// token that authenticates signals delivered to it.
type Waitpoint struct {
	ID, Key, Token string
}

// WaitpointBinding is an extra waitpoint of a suspension
// (SuspendExecutionParams.Extra), minted by the caller: a UUID and a
// non-empty key.
type WaitpointBinding struct {
	WaitpointID, WaitpointKey string
}

// CreatePendingWaitpointParams are the inputs of
// WaitpointDriver.CreatePendingWaitpoint.
type CreatePendingWaitpointParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	// WaitpointID is minted by the caller (UUID text); WaitpointKey is
	// its external key (required).
	WaitpointID  string
	WaitpointKey string
	// ExpiresAt (ms, required) closes the waitpoint if the attempt has
	// not suspended on it by then.
	ExpiresAt int64
}

// CompositeCondition is the multi-waitpoint resume condition document
// FlowFabric's backend sends ff_suspend_execution (and fabric stores in
// ff_suspension_current.condition on Postgres) for waitpoint keys (the
// primary one first): with quorum 0 an AllOf of one Single node per key
// (every waitpoint received a matching signal), otherwise a Count of
// quorum DistinctWaitpoints over the keys. The matcher is ByName signal,
// or Wildcard when signal is empty.
func CompositeCondition(keys []string, signal string, quorum int, behavior string) string {
	var matcher any = map[string]string{"kind": "Wildcard"}
	if signal != "" {
		matcher = map[string]string{"kind": "ByName", "name": signal}
	}
	var tree map[string]any
	if quorum > 0 {
		tree = map[string]any{"kind": "Count", "path": "", "n": quorum,
			"count_kind": "DistinctWaitpoints", "matcher": matcher, "waitpoints": keys}
	} else {
		members := make([]any, len(keys))
		for i, k := range keys {
			members[i] = map[string]any{"kind": "Single", "path": "members[" + strconv.Itoa(i) + "]",
				"waitpoint_key": k, "matcher": matcher}
		}
		tree = map[string]any{"kind": "AllOf", "path": "", "members": members}
	}
	if behavior == "" {
		behavior = TimeoutFail
	}
	b, _ := json.Marshal(map[string]any{"v": 1, "composite": true, "tree": tree,
		"timeout_behavior": behavior, "allow_operator_override": true})
	return string(b)
}

// ResumeCondition is the condition document of a suspension: the
// composite one (CompositeCondition over the primary key then the extra
// ones) when it waits on AllWaitpoints or a WaitpointQuorum, otherwise
// the signal_set one (SignalSetCondition) each waitpoint evaluates alone.
func (p *SuspendExecutionParams) ResumeCondition(primaryKey string) string {
	if !p.AllWaitpoints && p.WaitpointQuorum == 0 {
		return SignalSetCondition(p.SignalNames, p.MatchAll, p.TimeoutBehavior)
	}
	keys := []string{primaryKey}
	for _, x := range p.Extra {
		keys = append(keys, x.WaitpointKey)
	}
	name := ""
	if len(p.SignalNames) == 1 {
		name = p.SignalNames[0]
	}
	return CompositeCondition(keys, name, p.WaitpointQuorum, p.TimeoutBehavior)
}

// ValidateWaitpoints checks the waitpoint fields of p (Extra,
// PendingWaitpointID, AllWaitpoints, WaitpointQuorum, SignalNames) as
// both drivers do before writing anything; the error wraps
// ErrInvalidInput.
func (p *SuspendExecutionParams) ValidateWaitpoints() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: suspend %s: "+format, append([]any{ErrInvalidInput, p.ExecutionID}, a...)...)
	}
	switch {
	case p.PendingWaitpointID != "" && len(p.Extra) > 0:
		return bad("extra waitpoints cannot be combined with a pending waitpoint")
	case p.PendingWaitpointID == "" && p.WaitpointKey == "":
		return bad("empty waitpoint key")
	case len(p.Extra) > MaxExtraWaitpoints:
		return bad("%d extra waitpoints exceed %d", len(p.Extra), MaxExtraWaitpoints)
	case p.AllWaitpoints && p.WaitpointQuorum != 0:
		return bad("AllWaitpoints and WaitpointQuorum are exclusive")
	case p.WaitpointQuorum < 0 || p.WaitpointQuorum > 1+len(p.Extra):
		return bad("quorum %d is out of range 0..%d", p.WaitpointQuorum, 1+len(p.Extra))
	}
	for _, n := range p.SignalNames {
		if n == "" {
			return bad("empty signal name")
		}
	}
	if p.AllWaitpoints || p.WaitpointQuorum != 0 {
		switch {
		case len(p.Extra) == 0:
			return bad("a composite condition needs extra waitpoints")
		case len(p.SignalNames) > 1 || p.MatchAll:
			return bad("a composite condition takes at most one signal name and no MatchAll")
		}
	}
	seen := map[string]bool{p.WaitpointKey: true}
	for _, x := range p.Extra {
		if _, err := model.ParseUUID(x.WaitpointID); err != nil || x.WaitpointKey == "" || seen[x.WaitpointKey] {
			return bad("extra waitpoint %+v: a UUID id and a key of its own are required", x)
		}
		seen[x.WaitpointKey] = true
	}
	return nil
}

// MaxExtraWaitpoints bounds SuspendExecutionParams.Extra.
const MaxExtraWaitpoints = 64
