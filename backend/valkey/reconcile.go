package valkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/model"
)

// ReconcileIndexFunction is fabric's Valkey Function that repairs one
// execution's lane-index membership (lua/fabric/fabric.lua).
const ReconcileIndexFunction = "fabric_reconcile_execution_index"

// CodeLaneMismatch: the lane passed to fabric_reconcile_execution_index is
// not the execution's lane_id (the first detail is the core's lane).
const CodeLaneMismatch ErrorCode = "lane_mismatch"

// ReconcileIndexKeys returns the KEYS of fabric_reconcile_execution_index
// for eid in lane: exec core, suspension:current, then the lane's indexes
// in model.LaneIndexNames order. Every key is on eid's partition.
func ReconcileIndexKeys(eid model.ExecutionID, lane string) []string {
	k := model.KeysFor(eid)
	return append([]string{k.Core(), k.SuspensionCurrent()}, model.KeysOn(eid.Partition()).LaneIndexes(lane)...)
}

// IndexRepairAction is what fabric_reconcile_execution_index did.
type IndexRepairAction string

// Index repair actions.
const (
	// IndexConsistent: the execution was in its index alone, with the right
	// score; nothing was written.
	IndexConsistent IndexRepairAction = "consistent"
	// IndexRepaired: membership or score was fixed.
	IndexRepaired IndexRepairAction = "repaired"
	// IndexCoreMissing: the execution has no core hash; nothing was written.
	IndexCoreMissing IndexRepairAction = "missing"
	// IndexUnknownState: no lane index fits the core's state (e.g.
	// submitted, or blocked_by_lane_state); nothing was written.
	IndexUnknownState IndexRepairAction = "unknown"
)

// IndexRepair is the reply of fabric_reconcile_execution_index.
type IndexRepair struct {
	Action IndexRepairAction
	// Index is the lane index suffix the execution belongs in ("eligible",
	// "blocked:budget", ...); empty for missing and unknown.
	Index string
	// Score is its score there.
	Score float64
	// Added: the execution was missing from Index and was added.
	Added bool
	// OldScore is the score replaced in Index (Rescored only).
	OldScore float64
	// Rescored: the execution was in Index with a wrong score.
	Rescored bool
	// Removed are the other lane indexes it was taken out of.
	Removed []string
	// Phase, Eligibility and Ownership are the core's state (unknown only).
	Phase, Eligibility, Ownership string
}

// ReconcileExecutionIndex runs fabric_reconcile_execution_index for eid in
// lane ("" = "default"): atomically, the execution is put in the one lane
// index its core state belongs in, with the score the flowfabric functions
// give it there, and taken out of every other index of its lane. A missing
// core or a state without a lane index changes nothing. A lane that is not
// the core's lane_id fails with CodeLaneMismatch; a malformed id fails
// before any call.
//
//	KEYS[1] exec core  KEYS[2] suspension:current
//	KEYS[3..12] lane indexes (model.LaneIndexNames order)
//	ARGV[1] execution id  ARGV[2] lane id
func (c *Client) ReconcileExecutionIndex(ctx context.Context, eid model.ExecutionID, lane string) (IndexRepair, error) {
	const fn = ReconcileIndexFunction
	if _, err := model.ParseExecutionID(string(eid)); err != nil {
		return IndexRepair{}, fmt.Errorf("%s: %w", fn, err)
	}
	if lane == "" {
		lane = "default"
	}
	rep, err := c.FCall(ctx, fn, ReconcileIndexKeys(eid, lane), []string{string(eid), lane})
	if err != nil {
		return IndexRepair{}, schedWrap(fn, err)
	}
	r, err := ParseIndexRepair(rep.Fields)
	if err != nil {
		return IndexRepair{}, fmt.Errorf("%s: %w", fn, err)
	}
	return r, nil
}

// ParseIndexRepair decodes the fields after "OK" of a
// fabric_reconcile_execution_index reply.
func ParseIndexRepair(f []string) (IndexRepair, error) {
	field := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	r := IndexRepair{Action: IndexRepairAction(field(0))}
	switch r.Action {
	case IndexCoreMissing:
		return r, nil
	case IndexUnknownState:
		r.Phase, r.Eligibility, r.Ownership = field(1), field(2), field(3)
		return r, nil
	case IndexConsistent, IndexRepaired:
	default:
		return r, fmt.Errorf("%w: action %q", ErrMalformedReply, r.Action)
	}
	r.Index = field(1)
	score, err := strconv.ParseFloat(field(2), 64)
	if err != nil {
		return r, fmt.Errorf("%w: score %q", ErrMalformedReply, field(2))
	}
	r.Score = score
	if r.Action == IndexConsistent {
		return r, nil
	}
	r.Added = field(3) == "1"
	if old := field(4); old != "" {
		if r.OldScore, err = strconv.ParseFloat(old, 64); err != nil {
			return r, fmt.Errorf("%w: old score %q", ErrMalformedReply, old)
		}
		r.Rescored = true
	}
	if rm := field(5); rm != "" {
		r.Removed = strings.Split(rm, ",")
	}
	return r, nil
}
