package valkey

import (
	"context"
	"fmt"
	"strconv"

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
	DefaultMaxFramePayloadBytes = 65536
	// SummaryNullSentinel in a summary patch sets the leaf to JSON null.
	SummaryNullSentinel = "__ff_null__"
	// VisibilityExcludeBestEffort drops best-effort frames when reading.
	VisibilityExcludeBestEffort = "exclude_best_effort"
)

// AppendFrameParams are the inputs of ff_append_frame.
type AppendFrameParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	// Fence is the held lease; the attempt id is recorded, not checked.
	Fence     LeaseFence
	FrameType string
	// TS is the frame timestamp in ms; 0 lets the server stamp now.
	TS      int64
	Payload string
	// Encoding defaults to utf8; Source to worker.
	Encoding      string
	CorrelationID string
	Source        string
	// RetentionMaxLen trims durable streams exactly to this length; 0 trims
	// approximately to 10000.
	RetentionMaxLen int64
	// MaxPayloadBytes caps the payload (DefaultMaxFramePayloadBytes when 0).
	MaxPayloadBytes int64
	// Mode is durable (default), summary or best_effort.
	Mode string
	// PatchKind is json-merge-patch or "" (summary mode).
	PatchKind string
	// TTLMs, MaxLenFloor, MaxLenCeiling and EMAAlpha drive best-effort
	// retention; zero values take the server defaults (64, 16384, 0.2).
	TTLMs         int64
	MaxLenFloor   int64
	MaxLenCeiling int64
	EMAAlpha      float64
}

// Call builds the FCALL of ff_append_frame.
//
//	KEYS[1] exec_core  KEYS[2] stream(idx)  KEYS[3] stream_meta(idx)  KEYS[4] stream_summary(idx)
//	ARGV[1] execution_id  ARGV[2] attempt_index  ARGV[3] lease_id  ARGV[4] lease_epoch
//	ARGV[5] frame_type  ARGV[6] ts|""  ARGV[7] payload  ARGV[8] encoding
//	ARGV[9] correlation_id  ARGV[10] source  ARGV[11] retention_maxlen  ARGV[12] attempt_id
//	ARGV[13] max_payload_bytes  ARGV[14] stream_mode  ARGV[15] patch_kind  ARGV[16] ttl_ms
//	ARGV[17] maxlen_floor  ARGV[18] maxlen_ceiling  ARGV[19] ema_alpha
func (p *AppendFrameParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	enc := p.Encoding
	if enc == "" {
		enc = "utf8"
	}
	src := p.Source
	if src == "" {
		src = "worker"
	}
	maxBytes := p.MaxPayloadBytes
	if maxBytes == 0 {
		maxBytes = DefaultMaxFramePayloadBytes
	}
	return Call{
		Function: "ff_append_frame",
		Keys: []string{k.Core(), k.Stream(p.AttemptIndex), k.StreamMeta(p.AttemptIndex),
			k.StreamSummary(p.AttemptIndex)},
		Args: []string{string(p.ExecutionID), strconv.Itoa(p.AttemptIndex), p.Fence.LeaseID,
			fenceEpoch(p.Fence), p.FrameType, suspOpt(p.TS), p.Payload, enc, p.CorrelationID,
			src, suspInt(p.RetentionMaxLen), p.Fence.AttemptID, suspInt(maxBytes), p.Mode, p.PatchKind,
			suspInt(p.TTLMs), suspInt(p.MaxLenFloor), suspInt(p.MaxLenCeiling),
			strconv.FormatFloat(p.EMAAlpha, 'f', -1, 64)},
	}
}

// AppendFrameResult is the reply of ff_append_frame.
type AppendFrameResult struct {
	EntryID string
	// FrameCount is the lifetime append count of the attempt stream.
	FrameCount int64
	// SummaryVersion is the summary document version after a summary
	// append; 0 otherwise.
	SummaryVersion int64
}

// AppendFrame appends one output frame to the attempt stream
// (ff_append_frame).
func (c *Client) AppendFrame(ctx context.Context, p *AppendFrameParams) (*AppendFrameResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("append frame to "+string(p.ExecutionID), err)
	}
	n, _ := rep.Int(1)
	res := &AppendFrameResult{EntryID: rep.Field(0), FrameCount: n}
	if rep.Field(2) != "" {
		res.SummaryVersion, _ = rep.Int(2)
	}
	return res, nil
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
