package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// AppendFrameParams are the inputs of AppendFrame.
type AppendFrameParams = backend.AppendFrameParams

// AppendFrame appends one frame to the fenced attempt's stream, in one
// transaction that holds the execution's row lock (so appends to one
// attempt are serialised):
//
//	ff_stream_frame: (ts_ms, seq) after the attempt's last frame: now and seq 0, or the
//	  last ts_ms and seq + 1 when the clock has not moved past it; fields frame_type,
//	  payload, encoding utf8, source worker, correlation_id when set; mode
//	  (NOTIFY ff_stream_<uuid>_<attempt>)
//	summary mode: ff_stream_summary document merged with the patch (RFC 7396, the
//	  "__ff_null__" sentinel setting a leaf to null), version + 1
//
// and returns the entry id "<ts_ms>-<seq>". Upstream appends without a
// fence (spec postgres.md §7); fabric checks it as Valkey's ff_append_frame
// does, so a stale holder cannot write into an attempt it lost.
func (c *Client) AppendFrame(ctx context.Context, p *AppendFrameParams) (string, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return "", fmt.Errorf("append frame to %s: %w", p.ExecutionID, err)
	}
	mode := p.Mode
	if mode == "" {
		mode = backend.FrameDurable
	}
	var patch any
	switch {
	case p.FrameType == "":
		return "", fmt.Errorf("append frame to %s: %w: empty frame type", p.ExecutionID, CodeInvalidInput)
	case mode == backend.FrameSummary:
		if json.Unmarshal(p.Payload, &patch) != nil {
			return "", fmt.Errorf("append frame to %s: %w: a summary frame's payload must be JSON", p.ExecutionID, CodeInvalidInput)
		}
	case mode != backend.FrameDurable && mode != backend.FrameBestEffort:
		return "", fmt.Errorf("append frame to %s: %w: mode %q", p.ExecutionID, CodeInvalidInput, mode)
	}
	fields := map[string]string{"frame_type": p.FrameType, "payload": string(p.Payload), "encoding": "utf8", "source": "worker"}
	if p.CorrelationID != "" {
		fields["correlation_id"] = p.CorrelationID
	}
	fj, _ := json.Marshal(fields)
	idx := p.Fence.AttemptIndex
	var entry string
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		ts, seq := now, 0
		var lastTS int64
		var lastSeq int
		err := tx.QueryRow(ctx, `SELECT ts_ms, seq FROM ff_stream_frame
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3
 ORDER BY ts_ms DESC, seq DESC LIMIT 1`, k.part, [16]byte(k.uuid), idx).Scan(&lastTS, &lastSeq)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case lastTS >= now:
			ts, seq = lastTS, lastSeq+1
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_stream_frame (partition_key, execution_id, attempt_index, ts_ms, seq, fields, mode, created_at_ms)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8)`, k.part, [16]byte(k.uuid), idx, ts, seq, string(fj), mode, now); err != nil {
			return err
		}
		entry = strconv.FormatInt(ts, 10) + "-" + strconv.Itoa(seq)
		if mode != backend.FrameSummary {
			return nil
		}
		var doc any = map[string]any{}
		var raw []byte
		err = tx.QueryRow(ctx, `SELECT document_json FROM ff_stream_summary
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 FOR UPDATE`, k.part, [16]byte(k.uuid), idx).Scan(&raw)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal(raw, &doc); err != nil {
				return fmt.Errorf("summary document: %w", err)
			}
		}
		merged, _ := json.Marshal(mergePatch(doc, patch))
		_, err = tx.Exec(ctx, `INSERT INTO ff_stream_summary (partition_key, execution_id, attempt_index, document_json, version,
    patch_kind, last_updated_ms, first_applied_ms)
VALUES ($1, $2, $3, $4::jsonb, 1, 'json-merge-patch', $5, $5)
ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE SET document_json = EXCLUDED.document_json,
    version = ff_stream_summary.version + 1, last_updated_ms = EXCLUDED.last_updated_ms`,
			k.part, [16]byte(k.uuid), idx, string(merged), now)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("append frame to %s: %w", p.ExecutionID, err)
	}
	return entry, nil
}

// summaryNull in a summary patch sets the leaf to JSON null (a bare null
// deletes it, RFC 7396).
const summaryNull = "__ff_null__"

// mergePatch applies an RFC 7396 JSON merge patch to target.
func mergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for name, v := range pm {
		switch v := v.(type) {
		case nil:
			delete(tm, name)
		case string:
			if v == summaryNull {
				tm[name] = nil
			} else {
				tm[name] = v
			}
		case map[string]any:
			tm[name] = mergePatch(tm[name], v)
		default:
			tm[name] = v
		}
	}
	return tm
}

// ReadSummary returns an attempt's summary document ("" before the first
// summary frame) and its version.
func (c *Client) ReadSummary(ctx context.Context, id model.ExecutionID, attempt int) (string, int64, error) {
	k, err := splitExecID(id)
	if err != nil {
		return "", 0, fmt.Errorf("read summary of %s: %w", id, err)
	}
	var doc string
	var version int64
	err = c.pool.QueryRow(ctx, `SELECT document_json::text, version FROM ff_stream_summary
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), attempt).Scan(&doc, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read summary of %s: %w", id, notMigrated(err))
	}
	return doc, version, nil
}

// ReadStreamParams are the inputs of ReadStream; After is an entry id
// "<ms>-<seq>" (or "<ms>").
type ReadStreamParams = backend.ReadStreamParams

// StreamRead is what ReadStream read; Closed: the attempt ended (its
// ff_attempt row has terminal_at_ms).
type StreamRead = backend.StreamRead

// ReadStream reads up to Count frames of an attempt's stream after
// After, in (ts_ms, seq) order; an execution or attempt with no frames
// reads as none.
func (c *Client) ReadStream(ctx context.Context, p *ReadStreamParams) (*StreamRead, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("read stream of %s: %w", p.ExecutionID, err)
	}
	if p.AttemptIndex < 0 || p.Count < 1 || p.Count > 10000 {
		return nil, fmt.Errorf("read stream of %s: %w: attempt must be >= 0 and count in 1..10000", p.ExecutionID, CodeInvalidInput)
	}
	afterTS, afterSeq := int64(-1), int64(0)
	if p.After != "" {
		ms, seq, _ := strings.Cut(p.After, "-")
		if seq == "" {
			seq = "0"
		}
		t, err1 := strconv.ParseInt(ms, 10, 64)
		s, err2 := strconv.ParseInt(seq, 10, 32)
		if err1 != nil || err2 != nil || t < 0 || s < 0 {
			return nil, fmt.Errorf("read stream of %s: %w: entry id %q", p.ExecutionID, CodeInvalidInput, p.After)
		}
		afterTS, afterSeq = t, s
	}
	rows, err := c.pool.Query(ctx, `SELECT ts_ms, seq, fields FROM ff_stream_frame
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 AND (ts_ms, seq) > ($4::bigint, $5::int)
 ORDER BY ts_ms, seq LIMIT $6`, k.part, [16]byte(k.uuid), p.AttemptIndex, afterTS, afterSeq, p.Count)
	if err != nil {
		return nil, fmt.Errorf("read stream of %s: %w", p.ExecutionID, notMigrated(err))
	}
	frames, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend.StreamFrame, error) {
		var ts int64
		var seq int
		var f map[string]any
		if err := r.Scan(&ts, &seq, &f); err != nil {
			return backend.StreamFrame{}, err
		}
		out := backend.StreamFrame{ID: strconv.FormatInt(ts, 10) + "-" + strconv.Itoa(seq), Fields: make(map[string]string, len(f))}
		for name, v := range f {
			if s, ok := v.(string); ok {
				out.Fields[name] = s
			} else {
				b, _ := json.Marshal(v)
				out.Fields[name] = string(b)
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stream of %s: %w", p.ExecutionID, notMigrated(err))
	}
	var closed bool
	err = c.pool.QueryRow(ctx, `SELECT terminal_at_ms IS NOT NULL FROM ff_attempt
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), p.AttemptIndex).Scan(&closed)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read stream of %s: %w", p.ExecutionID, notMigrated(err))
	}
	return &StreamRead{Frames: frames, Closed: closed}, nil
}

// TailStream is ReadStream that waits up to block for a frame when
// there is none yet: it LISTENs on the attempt's channel
// (ff_stream_<uuid>_<attempt>, notified by ff_stream_frame's trigger)
// before reading, so a frame committed meanwhile is not missed, and
// reads again when notified. No frames in time is an empty read (its
// Closed still reported).
func (c *Client) TailStream(ctx context.Context, p *ReadStreamParams, block time.Duration) (*StreamRead, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("tail stream of %s: %w", p.ExecutionID, err)
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("tail stream of %s: %w", p.ExecutionID, err)
	}
	channel := pgx.Identifier{"ff_stream_" + k.id() + "_" + strconv.Itoa(p.AttemptIndex)}.Sanitize()
	defer func() {
		// The connection goes back to the pool listening on nothing; one
		// that cannot say so is closed instead.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "UNLISTEN "+channel); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return nil, fmt.Errorf("tail stream of %s: %w", p.ExecutionID, notMigrated(err))
	}
	deadline := time.Now().Add(block)
	for {
		r, err := c.ReadStream(ctx, p)
		if err != nil || len(r.Frames) > 0 || r.Closed {
			return r, err
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		_, err = conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("tail stream of %s: %w", p.ExecutionID, ctx.Err())
			}
			if time.Now().Before(deadline) {
				return nil, fmt.Errorf("tail stream of %s: %w", p.ExecutionID, err)
			}
			return c.ReadStream(ctx, p) // the block elapsed: one last read
		}
	}
}

// AppendFrame implements backend.ControlDriver.
func (d *Driver) AppendFrame(ctx context.Context, p *backend.AppendFrameParams) (*backend.AppendFrameResult, error) {
	id, err := d.c.AppendFrame(ctx, p)
	if err != nil {
		return nil, mapControlErr(err, true)
	}
	return &backend.AppendFrameResult{EntryID: id}, nil
}

// ReadStream implements backend.ControlDriver.
func (d *Driver) ReadStream(ctx context.Context, p *backend.ReadStreamParams) (*backend.StreamRead, error) {
	r, err := d.c.ReadStream(ctx, p)
	return r, mapControlErr(err, false)
}
