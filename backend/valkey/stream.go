package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// Stream modes and defaults of ff_append_frame.
const (
	StreamModeDurable    = "durable"
	StreamModeSummary    = "summary"
	StreamModeBestEffort = "best_effort"
	// PatchKindJSONMerge is the only summary patch kind.
	PatchKindJSONMerge = "json-merge-patch"
	// DefaultRetentionMaxLen is what FlowFabric's backend sends (exact trim).
	DefaultRetentionMaxLen = 10000
	// DefaultMaxFramePayloadBytes is the frame payload cap (64 KiB).
	DefaultMaxFramePayloadBytes = fcall.DefaultMaxFramePayloadBytes
	// SummaryNullSentinel in a summary patch sets the leaf to JSON null.
	SummaryNullSentinel = "__ff_null__"
	// VisibilityExcludeBestEffort drops best-effort frames when reading.
	VisibilityExcludeBestEffort = "exclude_best_effort"
)

// AppendFrameParams are the inputs of ff_append_frame
// (fcall.AppendFrameParams).
type AppendFrameParams = fcall.AppendFrameParams

// AppendFrameResult is the reply of ff_append_frame.
type AppendFrameResult = fcall.AppendFrameResult

// AppendFrame appends one output frame to the attempt stream
// (ff_append_frame).
func (c *Client) AppendFrame(ctx context.Context, p *AppendFrameParams) (*AppendFrameResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("append frame to "+string(p.ExecutionID), err)
	}
	return fcall.DecodeAppendFrame(rep), nil
}

// StreamFrame is one stream entry: its id and its field/value pairs.
type StreamFrame struct {
	ID     string
	Fields map[string]string
}

// AttemptStream is the reply of ff_read_attempt_stream.
type AttemptStream struct {
	Frames       []StreamFrame
	ClosedAt     string
	ClosedReason string
}

// ReadAttemptStreamCall builds the FCALL of ff_read_attempt_stream
// (fcall.ReadAttemptStreamCall).
func ReadAttemptStreamCall(eid model.ExecutionID, attemptIndex int, from, to string, count int, visibility string) Call {
	return fcall.ReadAttemptStreamCall(eid, attemptIndex, from, to, count, visibility)
}

// ReadAttemptStream reads up to count frames (1..10000) between from and
// to ("-"/"+" when empty) with the stream's close marker
// (ff_read_attempt_stream).
func (c *Client) ReadAttemptStream(ctx context.Context, eid model.ExecutionID, attemptIndex int, from, to string, count int, visibility string) (*AttemptStream, error) {
	call := ReadAttemptStreamCall(eid, attemptIndex, from, to, count, visibility)
	msg, err := c.FCallRaw(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("read attempt stream", err)
	}
	arr, err := msg.ToArray()
	if err != nil || len(arr) < 2 {
		return nil, fmt.Errorf("read attempt stream: %w", ErrMalformedReply)
	}
	if code, _ := arr[0].AsInt64(); code != 1 {
		_, perr := parseReply(call.Function, msg)
		return nil, suspWrap("read attempt stream", perr)
	}
	if len(arr) < 5 {
		return nil, fmt.Errorf("read attempt stream: %w", ErrMalformedReply)
	}
	entries, err := arr[2].ToArray()
	if err != nil {
		return nil, fmt.Errorf("read attempt stream: %w: %v", ErrMalformedReply, err)
	}
	out := &AttemptStream{ClosedAt: messageString(arr[3]), ClosedReason: messageString(arr[4])}
	for _, e := range entries {
		pair, err := e.ToArray()
		if err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("read attempt stream: %w", ErrMalformedReply)
		}
		id, _ := pair[0].ToString()
		kv, err := pair[1].AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("read attempt stream: %w: %v", ErrMalformedReply, err)
		}
		f := make(map[string]string, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			f[kv[i]] = kv[i+1]
		}
		out.Frames = append(out.Frames, StreamFrame{ID: id, Fields: f})
	}
	return out, nil
}

// Summary is the reply of ff_read_summary.
type Summary = fcall.Summary

// ReadSummary reads an attempt's summary document (ff_read_summary); an
// absent summary is the zero Summary.
//
//	KEYS[1] stream_summary(idx)
func (c *Client) ReadSummary(ctx context.Context, eid model.ExecutionID, attemptIndex int) (*Summary, error) {
	call := fcall.ReadSummaryCall(eid, attemptIndex)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("read summary", err)
	}
	return fcall.DecodeSummary(rep), nil
}
