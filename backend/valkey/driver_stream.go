package valkey

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// TailStream implements backend.AttemptReadDriver as FlowFabric's tail
// does: XREAD BLOCK on the attempt's stream (valkey-go sends blocking
// commands on pooled connections, so the wait does not stall the shared
// pipeline), then the close marker of its meta hash.
func (d *Driver) TailStream(ctx context.Context, p *backend.TailStreamParams) (*backend.StreamRead, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: tail stream: %v", backend.ErrInvalidInput, err)
	}
	if p.AttemptIndex < 0 || p.Count < 1 || p.Count > 10000 || p.Block < time.Millisecond {
		return nil, fmt.Errorf("%w: tail stream of %s: attempt must be >= 0, count in 1..10000 and block at least 1ms",
			backend.ErrInvalidInput, p.ExecutionID)
	}
	after := cmp.Or(p.After, "0-0")
	k := model.KeysFor(p.ExecutionID)
	raw := d.c.Raw()
	res, err := raw.Do(ctx, raw.B().Xread().Count(int64(p.Count)).Block(p.Block.Milliseconds()).
		Streams().Key(k.Stream(p.AttemptIndex)).Id(after).Build()).AsXRead()
	if err != nil && !vk.IsValkeyNil(err) {
		return nil, fmt.Errorf("tail stream of %s: %w", p.ExecutionID, err)
	}
	out := &backend.StreamRead{}
	for _, e := range res[k.Stream(p.AttemptIndex)] {
		out.Frames = append(out.Frames, backend.StreamFrame{ID: e.ID, Fields: e.FieldValues})
	}
	closedAt, err := raw.Do(ctx, raw.B().Hget().Key(k.StreamMeta(p.AttemptIndex)).Field("closed_at").Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		return nil, fmt.Errorf("read stream meta of %s: %w", p.ExecutionID, err)
	}
	out.Closed = closedAt != ""
	return out, nil
}

// ReadSummary implements backend.AttemptReadDriver (ff_read_summary).
func (d *Driver) ReadSummary(ctx context.Context, p *backend.ReadSummaryParams) (*backend.Summary, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: read summary: %v", backend.ErrInvalidInput, err)
	}
	s, err := d.c.ReadSummary(ctx, p.ExecutionID, p.AttemptIndex)
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	return &backend.Summary{Document: s.Document, Version: s.Version}, nil
}

// ResumeSignals implements backend.AttemptReadDriver: the suspension
// record (suspension_current) must be of the attempt and closed resumed;
// its satisfiers are all_satisfier_signals (composite conditions) or the
// satisfied matchers of each waitpoint's condition hash; the signal
// records and payloads are then read in one round trip.
func (d *Driver) ResumeSignals(ctx context.Context, p *backend.ResumeSignalsParams) ([]backend.ResumeSignal, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: resume signals: %v", backend.ErrInvalidInput, err)
	}
	if p.WaitpointID != "" {
		ids, err := d.satisfiedSignals(ctx, p.ExecutionID, []string{p.WaitpointID})
		if err != nil {
			return nil, err
		}
		return d.readSignals(ctx, p.ExecutionID, ids)
	}
	raw := d.c.Raw()
	m, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeysFor(p.ExecutionID).SuspensionCurrent()).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("read suspension of %s: %w", p.ExecutionID, err)
	}
	if m["attempt_index"] != strconv.Itoa(p.AttemptIndex) || m["close_reason"] != "resumed" {
		return nil, nil
	}
	var ids []string
	if sat := m["all_satisfier_signals"]; sat != "" {
		if err := json.Unmarshal([]byte(sat), &ids); err != nil {
			return nil, fmt.Errorf("suspension of %s: all_satisfier_signals: %w", p.ExecutionID, err)
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
		if ids, err = d.satisfiedSignals(ctx, p.ExecutionID, wps); err != nil {
			return nil, err
		}
	}
	return d.readSignals(ctx, p.ExecutionID, ids)
}

// satisfiedSignals reads the signal ids recorded on the satisfied
// matchers of the waitpoints' condition hashes (matcher form).
func (d *Driver) satisfiedSignals(ctx context.Context, id model.ExecutionID, wps []string) ([]string, error) {
	raw := d.c.Raw()
	pk := model.KeysOn(id.Partition())
	cmds := make(vk.Commands, 0, len(wps))
	for _, wp := range wps {
		cmds = append(cmds, raw.B().Hgetall().Key(pk.WaitpointCondition(wp)).Build())
	}
	var ids []string
	for i, r := range raw.DoMulti(ctx, cmds...) {
		c, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("read condition of waitpoint %s: %w", wps[i], err)
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

// readSignals reads the signal records and payloads of ids in one round
// trip, ordered by acceptance time (records trimmed by retention are
// left out).
func (d *Driver) readSignals(ctx context.Context, id model.ExecutionID, ids []string) ([]backend.ResumeSignal, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw := d.c.Raw()
	pk := model.KeysOn(id.Partition())
	cmds := make(vk.Commands, 0, 2*len(ids))
	for _, s := range ids {
		cmds = append(cmds, raw.B().Hgetall().Key(pk.Signal(s)).Build(), raw.B().Get().Key(pk.SignalPayload(s)).Build())
	}
	res := raw.DoMulti(ctx, cmds...)
	out := make([]backend.ResumeSignal, 0, len(ids))
	for i, s := range ids {
		h, err := res[2*i].AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("read signal %s: %w", s, err)
		}
		if len(h) == 0 {
			continue
		}
		var payload []byte
		if b, err := res[2*i+1].AsBytes(); err == nil {
			payload = b
		} else if !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("read payload of signal %s: %w", s, err)
		}
		at, _ := strconv.ParseInt(h["accepted_at"], 10, 64)
		out = append(out, backend.ResumeSignal{ID: s, WaitpointID: h["target_waitpoint_id"], Name: h["signal_name"],
			Category: h["signal_category"], SourceType: h["source_type"], SourceIdentity: h["source_identity"],
			CorrelationID: h["correlation_id"], AcceptedAt: at, Payload: payload})
	}
	slices.SortStableFunc(out, func(a, b backend.ResumeSignal) int {
		return cmp.Or(cmp.Compare(a.AcceptedAt, b.AcceptedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}
