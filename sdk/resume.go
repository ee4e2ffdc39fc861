package sdk

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// ResumeSignal is a signal that satisfied a suspension's resume
// condition, as a resumed attempt reads it back.
type ResumeSignal struct {
	// ID is the signal id; WaitpointID the waitpoint it was delivered to.
	ID, WaitpointID string
	// Name, Category, SourceType, SourceIdentity and CorrelationID are
	// as delivered.
	Name, Category, SourceType, SourceIdentity, CorrelationID string
	// AcceptedAt is when the server accepted the signal.
	AcceptedAt time.Time
	// Payload is the signal's body (nil when it had none).
	Payload []byte
}

// ResumeSignals returns the signals that resumed this attempt from its
// suspension, oldest first (by acceptance time, in milliseconds): those that satisfied the resume condition's
// matchers (every counted waitpoint's satisfiers under
// SuspendSpec.AllWaitpoints or WaitpointQuorum). Signals that were delivered but matched
// nothing are not included. It returns nothing for an attempt that was
// not resumed by signals (a first run, a retry, a timeout resume).
func (l *Lease) ResumeSignals(ctx context.Context) ([]ResumeSignal, error) {
	if l.w.pg != nil {
		return l.pgResumeSignals(ctx)
	}
	raw := l.w.vc.Raw()
	m, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeysFor(l.ID).SuspensionCurrent()).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("sdk: read suspension of %s: %w", l.ID, err)
	}
	if m["attempt_index"] != strconv.Itoa(l.AttemptIndex) || m["close_reason"] != "resumed" {
		return nil, nil
	}
	var ids []string
	if sat := m["all_satisfier_signals"]; sat != "" {
		if err := json.Unmarshal([]byte(sat), &ids); err != nil {
			return nil, fmt.Errorf("sdk: suspension of %s: all_satisfier_signals: %w", l.ID, err)
		}
	} else {
		wps := []string{m["waitpoint_id"]}
		var extra []struct {
			ID string `json:"waitpoint_id"`
		}
		_ = json.Unmarshal([]byte(m["additional_waitpoints_json"]), &extra)
		for _, x := range extra {
			wps = append(wps, x.ID)
		}
		if ids, err = l.w.satisfiedSignals(ctx, l.ID, wps); err != nil {
			return nil, err
		}
	}
	return l.w.readSignals(ctx, l.ID, ids)
}

// ResumeSignals returns the signals that resumed the job (see
// Lease.ResumeSignals).
func (j *Job) ResumeSignals(ctx context.Context) ([]ResumeSignal, error) {
	return j.lease.ResumeSignals(ctx)
}

// satisfiedSignals reads the signal ids recorded on the satisfied
// matchers of the waitpoints' condition hashes (matcher form).
func (w *Worker) satisfiedSignals(ctx context.Context, id model.ExecutionID, wps []string) ([]string, error) {
	raw := w.vc.Raw()
	pk := model.KeysOn(id.Partition())
	cmds := make(vk.Commands, 0, len(wps))
	for _, wp := range wps {
		cmds = append(cmds, raw.B().Hgetall().Key(pk.WaitpointCondition(wp)).Build())
	}
	var ids []string
	for i, r := range raw.DoMulti(ctx, cmds...) {
		c, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("sdk: read condition of waitpoint %s: %w", wps[i], err)
		}
		total, _ := strconv.Atoi(c["total_matchers"])
		for m := range total {
			p := "matcher:" + strconv.Itoa(m) + ":"
			if c[p+"satisfied"] == "1" && c[p+"signal_id"] != "" {
				ids = append(ids, c[p+"signal_id"])
			}
		}
	}
	return ids, nil
}

// readSignals reads the signal records and payloads of ids in one
// round trip, ordered by acceptance time.
func (w *Worker) readSignals(ctx context.Context, id model.ExecutionID, ids []string) ([]ResumeSignal, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw := w.vc.Raw()
	pk := model.KeysOn(id.Partition())
	cmds := make(vk.Commands, 0, 2*len(ids))
	for _, s := range ids {
		cmds = append(cmds, raw.B().Hgetall().Key(pk.Signal(s)).Build(), raw.B().Get().Key(pk.SignalPayload(s)).Build())
	}
	res := raw.DoMulti(ctx, cmds...)
	out := make([]ResumeSignal, 0, len(ids))
	for i, s := range ids {
		h, err := res[2*i].AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("sdk: read signal %s: %w", s, err)
		}
		if len(h) == 0 {
			continue // trimmed by retention
		}
		var payload []byte
		if b, err := res[2*i+1].AsBytes(); err == nil {
			payload = b
		} else if !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("sdk: read payload of signal %s: %w", s, err)
		}
		at, _ := strconv.ParseInt(h["accepted_at"], 10, 64)
		out = append(out, ResumeSignal{ID: s, WaitpointID: h["target_waitpoint_id"], Name: h["signal_name"],
			Category: h["signal_category"], SourceType: h["source_type"], SourceIdentity: h["source_identity"],
			CorrelationID: h["correlation_id"], AcceptedAt: time.UnixMilli(at), Payload: payload})
	}
	slices.SortStableFunc(out, func(a, b ResumeSignal) int {
		return cmp.Or(a.AcceptedAt.Compare(b.AcceptedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// SuspendOutcome is what TrySuspend did.
type SuspendOutcome struct {
	// Suspended: the lease is released and the job resumes in a later
	// claim (read its signals there with ResumeSignals).
	Suspended bool
	// Suspension is the suspension's waitpoints and tokens.
	Suspension *Suspension
	// Signals, when not Suspended, are the signals buffered on the
	// pending waitpoint that already satisfy the condition: the lease is
	// kept and the handler continues with them at once.
	Signals []ResumeSignal
}

// TrySuspend suspends like Suspend, but makes the already-satisfied case
// explicit: when signals buffered on a pending waitpoint
// (SuspendSpec.Pending) already satisfy the condition, nothing is
// suspended, the lease is kept, and the outcome carries those signals so
// the handler goes on without a trip through the queue. The Suspend
// wrapper reports that case only as Suspension.AlreadySatisfied.
//
// If the signals cannot be read after an already-satisfied suspend, the
// outcome is returned with the error; the lease is still held.
func (l *Lease) TrySuspend(ctx context.Context, spec SuspendSpec) (*SuspendOutcome, error) {
	s, err := l.Suspend(ctx, spec)
	if err != nil {
		return nil, err
	}
	out := &SuspendOutcome{Suspended: !s.AlreadySatisfied, Suspension: s}
	if out.Suspended {
		return out, nil
	}
	ids, err := l.w.satisfiedSignals(ctx, l.ID, []string{s.WaitpointID})
	if err == nil {
		out.Signals, err = l.w.readSignals(ctx, l.ID, ids)
	}
	return out, err
}

// TrySuspend suspends unless the condition is already satisfied (see
// Lease.TrySuspend).
func (j *Job) TrySuspend(ctx context.Context, spec SuspendSpec) (*SuspendOutcome, error) {
	return j.lease.TrySuspend(ctx, spec)
}
