package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

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
