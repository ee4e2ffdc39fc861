package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// DefaultMaxFramePayloadBytes is the frame payload cap ff_append_frame
// is sent when AppendFrameParams.MaxPayloadBytes is 0 (64 KiB).
const DefaultMaxFramePayloadBytes = 65536

// AppendFrameParams are the inputs of ff_append_frame.
type AppendFrameParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	// Fence is the held lease; the attempt id is recorded, not checked.
	Fence     Fence
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
			p.Fence.epoch(), p.FrameType, msOrEmpty(p.TS), p.Payload, enc, p.CorrelationID,
			src, itoa(p.RetentionMaxLen), p.Fence.AttemptID, itoa(maxBytes), p.Mode, p.PatchKind,
			itoa(p.TTLMs), itoa(p.MaxLenFloor), itoa(p.MaxLenCeiling),
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

// DecodeAppendFrame reads ff_append_frame's reply: {entry_id,
// frame_count, summary_version ("" unless a summary append)}.
func DecodeAppendFrame(r *Reply) *AppendFrameResult {
	n, _ := r.Int(1)
	res := &AppendFrameResult{EntryID: r.Field(0), FrameCount: n}
	if r.Field(2) != "" {
		res.SummaryVersion, _ = r.Int(2)
	}
	return res
}

// ReadAttemptStreamCall builds ff_read_attempt_stream: up to count frames
// between from and to ("-"/"+" when empty).
//
//	KEYS[1] stream(idx)  KEYS[2] stream_meta(idx)
//	ARGV[1] from_id  ARGV[2] to_id  ARGV[3] count_limit  ARGV[4] visibility
func ReadAttemptStreamCall(eid model.ExecutionID, attemptIndex int, from, to string, count int, visibility string) Call {
	k := model.KeysFor(eid)
	if from == "" {
		from = "-"
	}
	if to == "" {
		to = "+"
	}
	return Call{
		Function: "ff_read_attempt_stream",
		Keys:     []string{k.Stream(attemptIndex), k.StreamMeta(attemptIndex)},
		Args:     []string{from, to, strconv.Itoa(count), visibility},
	}
}

// ReadSummaryCall builds ff_read_summary.
//
//	KEYS[1] stream_summary(idx)
func ReadSummaryCall(eid model.ExecutionID, attemptIndex int) Call {
	return Call{Function: "ff_read_summary", Keys: []string{model.KeysFor(eid).StreamSummary(attemptIndex)}}
}

// Summary is the reply of ff_read_summary.
type Summary struct {
	Document       string
	Version        int64
	PatchKind      string
	LastUpdatedMs  int64
	FirstAppliedMs int64
}

// DecodeSummary reads ff_read_summary's reply; an absent summary is the
// zero Summary.
func DecodeSummary(r *Reply) *Summary {
	s := &Summary{Document: r.Field(0), PatchKind: r.Field(2)}
	s.Version, _ = r.Int(1)
	s.LastUpdatedMs, _ = r.Int(3)
	s.FirstAppliedMs, _ = r.Int(4)
	return s
}
