package abi

import (
	"errors"

	"github.com/fabric-host/fabric/internal/errtext"
	"github.com/fabric-host/fabric/model"
)

// Message tags: the first byte of each top-level message, so a buffer of
// the wrong kind (or garbage) fails fast.
const (
	tagScanRequest  = 0xA1
	tagScanResult   = 0xA2
	tagFCallRequest = 0xB1
	tagFCallResp    = 0xB2
	tagHMGetRequest = 0xB3
	tagHMGetResp    = 0xB4
	tagZRangeReq    = 0xB5
	tagMembers      = 0xB6
	tagKeyRequest   = 0xB7
	tagCursorReq    = 0xB8
	tagCursorResp   = 0xB9
	tagMetric       = 0xBA
)

func expectTag(d *Decoder, want byte, what string) error {
	if got := d.Byte(); d.Err() == nil && got != want {
		return errtext.Wrap(ErrDecode, what+": "+ErrDecode.Error()+": tag 0x"+errtext.Hex2(got)+", want 0x"+errtext.Hex2(want))
	}
	return nil
}

// ScanRequest is the input of fabric_scan: scan one partition once.
type ScanRequest struct {
	// Cycle is the sweep number, starting at 1 for the plugin's first sweep
	// in this host; every partition of one sweep sees the same value.
	Cycle uint64
	// Partition is the partition to scan.
	Partition model.Partition
	// Partitions is the family's partition count.
	Partitions uint16
	// BatchSize is the most items to act on in this call.
	BatchSize uint32
	// DeadlineMs is the call's budget in milliseconds (the manifest's
	// timeout_ms or the host's override); past it the call is killed.
	DeadlineMs uint32
}

// MarshalBinary encodes the request.
func (r *ScanRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 24))
	e.Byte(tagScanRequest)
	e.Uvarint(r.Cycle)
	e.Byte(byte(r.Partition.Family))
	e.Uvarint(uint64(r.Partition.Index))
	e.Uvarint(uint64(r.Partitions))
	e.Uvarint(uint64(r.BatchSize))
	e.Uvarint(uint64(r.DeadlineMs))
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *ScanRequest) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagScanRequest, "scan request"); err != nil {
		return err
	}
	var out ScanRequest
	out.Cycle = d.Uvarint()
	out.Partition.Family = model.Family(d.Byte())
	idx := d.Uvarint()
	parts := d.Uvarint()
	out.BatchSize = d.Uint32()
	out.DeadlineMs = d.Uint32()
	if err := d.Finish("scan request"); err != nil {
		return err
	}
	if idx > 0xffff || parts > 0xffff {
		return errtext.Wrap(ErrDecode, "scan request: "+ErrDecode.Error()+": partition "+errtext.U(idx)+" of "+errtext.U(parts))
	}
	out.Partition.Index, out.Partitions = uint16(idx), uint16(parts)
	*r = out
	return nil
}

// ScanResult is the output of fabric_scan: what one partition scan did. The
// same struct feeds logs, metrics, shadow-mode diffs and replay.
type ScanResult struct {
	// Scanned is the number of candidates read from indexes.
	Scanned uint32 `json:"scanned"`
	// Acted is the number of candidates acted on successfully (FlowFabric's
	// "processed").
	Acted uint32 `json:"acted"`
	// Skipped is the number of candidates passed over (failure-tracker
	// backoff, filter, not yet due).
	Skipped uint32 `json:"skipped"`
	// Errors is the number of failures observed.
	Errors uint32 `json:"errors"`
	// NextDueMs is the earliest due time the scan saw but did not act on,
	// in server milliseconds; 0 when unknown. A due-time timer may use it to
	// wake the partition early.
	NextDueMs int64 `json:"next_due_ms,omitempty"`
}

// Add sums o into r; NextDueMs keeps the earliest non-zero value.
func (r *ScanResult) Add(o ScanResult) {
	r.Scanned += o.Scanned
	r.Acted += o.Acted
	r.Skipped += o.Skipped
	r.Errors += o.Errors
	if o.NextDueMs != 0 && (r.NextDueMs == 0 || o.NextDueMs < r.NextDueMs) {
		r.NextDueMs = o.NextDueMs
	}
}

// MarshalBinary encodes the result.
func (r *ScanResult) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 24))
	e.Byte(tagScanResult)
	r.appendFields(e)
	return e.Bytes(), nil
}

// appendFields encodes r's fields (no tag): a ScanResult and each result
// of a ScanBatchResult share the layout.
func (r *ScanResult) appendFields(e *Encoder) {
	e.Uvarint(uint64(r.Scanned))
	e.Uvarint(uint64(r.Acted))
	e.Uvarint(uint64(r.Skipped))
	e.Uvarint(uint64(r.Errors))
	e.Varint(r.NextDueMs)
}

// decodeFields reads what appendFields wrote.
func (r *ScanResult) decodeFields(d *Decoder) {
	r.Scanned = d.Uint32()
	r.Acted = d.Uint32()
	r.Skipped = d.Uint32()
	r.Errors = d.Uint32()
	r.NextDueMs = d.Varint()
}

// UnmarshalBinary decodes a result; any trailing byte is an error.
func (r *ScanResult) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagScanResult, "scan result"); err != nil {
		return err
	}
	var out ScanResult
	out.decodeFields(d)
	if err := d.Finish("scan result"); err != nil {
		return err
	}
	*r = out
	return nil
}

// Call is one FCALL of an fcall batch.
type Call struct {
	// Function is the Valkey Function, e.g. "ff_promote_delayed".
	Function string
	// Keys and Args are KEYS and ARGV.
	Keys, Args []string
	// Item, when set, is the failure-tracker key of the call (usually the
	// execution id): an item in backoff is not called and comes back
	// StatusSkipped, and the outcome is recorded.
	Item string
}

// CallStatus is the outcome kind of one Call.
type CallStatus uint8

// Call outcomes.
const (
	// StatusOK: the function returned {1, status, fields...}.
	StatusOK CallStatus = 0
	// StatusLuaError: the function returned {0, code, details...}; Status
	// is the code, Fields the details.
	StatusLuaError CallStatus = 1
	// StatusError: the call failed (server error, malformed reply,
	// deadline); Status is the message.
	StatusError CallStatus = 2
	// StatusSkipped: Item is in failure-tracker backoff; not called.
	StatusSkipped CallStatus = 3
	// StatusDryRun: the plugin runs as a shadow (a candidate version
	// beside the live one, ABI 1.2.1): the host recorded the call and did
	// not send it. Status and Fields are empty.
	StatusDryRun CallStatus = 4
)

// CallResult is the outcome of one Call.
type CallResult struct {
	Result CallStatus
	// Status is the reply status ("OK", ...), the Lua error code, or the
	// error message, depending on Result.
	Status string
	// Fields are the reply fields or Lua error details.
	Fields []string
}

// OK reports StatusOK.
func (c CallResult) OK() bool { return c.Result == StatusOK }

// DryRun reports StatusDryRun: the call was recorded by a shadow run,
// not sent.
func (c CallResult) DryRun() bool { return c.Result == StatusDryRun }

// FCallRequest is the request of the fcall host function.
type FCallRequest struct{ Calls []Call }

// MarshalBinary encodes the request.
func (r *FCallRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 64*len(r.Calls)+4))
	r.AppendTo(e)
	return e.Bytes(), nil
}

// AppendTo encodes the request into e.
func (r *FCallRequest) AppendTo(e *Encoder) {
	e.Byte(tagFCallRequest)
	e.Uvarint(uint64(len(r.Calls)))
	for _, c := range r.Calls {
		e.String(c.Function)
		e.Strings(c.Keys)
		e.Strings(c.Args)
		e.String(c.Item)
	}
}

// UnmarshalBinary decodes a request.
func (r *FCallRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *FCallRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagFCallRequest, "fcall request"); err != nil {
		return err
	}
	// A call is at least 4 bytes: two string lengths and two list counts.
	calls := decodeList(d, 4, func(d *Decoder) Call {
		return Call{Function: d.String(), Keys: d.Strings(), Args: d.Strings(), Item: d.String()}
	})
	if err := d.Finish("fcall request"); err != nil {
		return err
	}
	r.Calls = calls
	return nil
}

// FCallResponse is the response of the fcall host function, one result per
// call in order.
type FCallResponse struct{ Results []CallResult }

// MarshalBinary encodes the response.
func (r *FCallResponse) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 16*len(r.Results)+4))
	e.Byte(tagFCallResp)
	e.Uvarint(uint64(len(r.Results)))
	for _, c := range r.Results {
		e.Byte(byte(c.Result))
		e.String(c.Status)
		e.Strings(c.Fields)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a response.
func (r *FCallResponse) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagFCallResp, "fcall response"); err != nil {
		return err
	}
	// A result is at least 3 bytes: its status byte, a string length and
	// a fields count.
	out := decodeList(d, 3, func(d *Decoder) CallResult {
		return CallResult{Result: CallStatus(d.Byte()), Status: d.String(), Fields: d.Strings()}
	})
	if err := d.Finish("fcall response"); err != nil {
		return err
	}
	r.Results = out
	return nil
}

// HMGetRequest is the request of hmget.
type HMGetRequest struct {
	Key    string
	Fields []string
}

// MarshalBinary encodes the request.
func (r *HMGetRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagHMGetRequest)
	e.String(r.Key)
	e.Strings(r.Fields)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *HMGetRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *HMGetRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagHMGetRequest, "hmget request"); err != nil {
		return err
	}
	out := HMGetRequest{Key: d.String(), Fields: d.Strings()}
	if err := d.Finish("hmget request"); err != nil {
		return err
	}
	*r = out
	return nil
}

// Field is one HMGET value; Present is false for a missing field or key.
type Field struct {
	Value   string
	Present bool
}

// HMGetResponse is the response of hmget, one Field per requested field.
type HMGetResponse struct{ Values []Field }

// MarshalBinary encodes the response.
func (r *HMGetResponse) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagHMGetResp)
	e.Uvarint(uint64(len(r.Values)))
	for _, v := range r.Values {
		e.Bool(v.Present)
		e.String(v.Value)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a response.
func (r *HMGetResponse) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagHMGetResp, "hmget response"); err != nil {
		return err
	}
	// A field is at least its presence flag and its length.
	out := decodeList(d, 2, func(d *Decoder) Field {
		present := d.Bool()
		return Field{Present: present, Value: d.String()}
	})
	if err := d.Finish("hmget response"); err != nil {
		return err
	}
	r.Values = out
	return nil
}

// ZRangeRequest is the request of zrangebyscore: ZRANGEBYSCORE Key Min Max
// LIMIT Offset Count. Min and Max use Valkey's syntax ("-inf", "(5", "17").
type ZRangeRequest struct {
	Key        string
	Min, Max   string
	Offset     uint32
	Count      uint32
	WithScores bool
}

// MarshalBinary encodes the request.
func (r *ZRangeRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagZRangeReq)
	e.String(r.Key)
	e.String(r.Min)
	e.String(r.Max)
	e.Uvarint(uint64(r.Offset))
	e.Uvarint(uint64(r.Count))
	e.Bool(r.WithScores)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *ZRangeRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *ZRangeRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagZRangeReq, "zrangebyscore request"); err != nil {
		return err
	}
	out := ZRangeRequest{Key: d.String(), Min: d.String(), Max: d.String(), Offset: d.Uint32(), Count: d.Uint32(), WithScores: d.Bool()}
	if err := d.Finish("zrangebyscore request"); err != nil {
		return err
	}
	*r = out
	return nil
}

// Members is a list of set members or keys; with scores, Scores is
// parallel to Members.
type Members struct {
	Members []string
	Scores  []float64
}

// MarshalBinary encodes the list.
func (r *Members) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 48*len(r.Members)+4))
	e.Byte(tagMembers)
	e.Strings(r.Members)
	e.Uvarint(uint64(len(r.Scores)))
	for _, s := range r.Scores {
		e.Float64(s)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a list.
func (r *Members) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagMembers, "members"); err != nil {
		return err
	}
	out := Members{Members: d.Strings()}
	if scores := decodeList(d, 8, (*Decoder).Float64); len(scores) > 0 {
		out.Scores = scores
	}
	if err := d.Finish("members"); err != nil {
		return err
	}
	*r = out
	return nil
}

// KeyRequest names one key (smembers).
type KeyRequest struct{ Key string }

// MarshalBinary encodes the request.
func (r *KeyRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagKeyRequest)
	e.String(r.Key)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *KeyRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *KeyRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagKeyRequest, "key request"); err != nil {
		return err
	}
	k := d.String()
	if err := d.Finish("key request"); err != nil {
		return err
	}
	r.Key = k
	return nil
}

// ScanCursorRequest is the request of sscan: SSCAN Key Cursor [MATCH
// Match] COUNT Count. Cursor "0" starts a walk.
type ScanCursorRequest struct {
	Key    string
	Cursor string
	Match  string
	Count  uint32
}

// MarshalBinary encodes the request.
func (r *ScanCursorRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagCursorReq)
	e.String(r.Key)
	e.String(r.Cursor)
	e.String(r.Match)
	e.Uvarint(uint64(r.Count))
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *ScanCursorRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *ScanCursorRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagCursorReq, "sscan request"); err != nil {
		return err
	}
	out := ScanCursorRequest{Key: d.String(), Cursor: d.String(), Match: d.String(), Count: d.Uint32()}
	if err := d.Finish("sscan request"); err != nil {
		return err
	}
	*r = out
	return nil
}

// ScanCursorResponse is one page of a cursor walk; Cursor "0" ends it.
type ScanCursorResponse struct {
	Cursor  string
	Members []string
}

// MarshalBinary encodes the page.
func (r *ScanCursorResponse) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagCursorResp)
	e.String(r.Cursor)
	e.Strings(r.Members)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a page.
func (r *ScanCursorResponse) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagCursorResp, "sscan response"); err != nil {
		return err
	}
	out := ScanCursorResponse{Cursor: d.String(), Members: d.Strings()}
	if err := d.Finish("sscan response"); err != nil {
		return err
	}
	*r = out
	return nil
}

// MetricKind says how a Metric's value applies.
type MetricKind uint8

// Metric kinds.
const (
	// MetricCounter adds Value to the counter.
	MetricCounter MetricKind = 0
	// MetricGauge sets the gauge to Value.
	MetricGauge MetricKind = 1
)

// Metric is the request of the metric host function. The host prefixes
// Name with the plugin's name, so plugins cannot collide.
type Metric struct {
	Kind  MetricKind
	Name  string
	Value float64
}

// MarshalBinary encodes the metric.
func (r *Metric) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagMetric)
	e.Byte(byte(r.Kind))
	e.String(r.Name)
	e.Float64(r.Value)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a metric.
func (r *Metric) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *Metric) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagMetric, "metric"); err != nil {
		return err
	}
	out := Metric{Kind: MetricKind(d.Byte()), Name: d.String(), Value: d.Float64()}
	if err := d.Finish("metric"); err != nil {
		return err
	}
	*r = out
	return nil
}

// AppendEnvelope returns a success envelope: CodeOK then body.
func AppendEnvelope(dst []byte, body []byte) []byte {
	dst = append(dst, byte(CodeOK))
	return append(dst, body...)
}

// ErrorEnvelope returns a failure envelope for err: its Code (CodeBackend
// unless err is or wraps an *Error or a Code) then the message.
func ErrorEnvelope(err error) []byte {
	code, msg := CodeBackend, err.Error()
	var ae *Error
	var c Code
	switch {
	case errors.As(err, &ae):
		code, msg = ae.Code, ae.Message
	case errors.As(err, &c):
		code = c
	}
	if code == CodeOK {
		code = CodeBackend
	}
	e := NewEncoder(make([]byte, 0, len(msg)+4))
	e.Byte(byte(code))
	e.String(msg)
	return e.Bytes()
}

// OpenEnvelope splits an envelope into its body, or returns the *Error it
// carries.
func OpenEnvelope(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errtext.Wrap(ErrDecode, "envelope: "+ErrDecode.Error()+": empty")
	}
	if Code(b[0]) == CodeOK {
		return b[1:], nil
	}
	d := NewDecoder(b[1:])
	msg := d.String()
	if err := d.Finish("envelope"); err != nil {
		return nil, err
	}
	return nil, &Error{Code: Code(b[0]), Message: msg}
}
