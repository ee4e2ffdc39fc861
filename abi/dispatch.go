package abi

import (
	"errors"
	"strings"

	"github.com/fabric-host/fabric/internal/errtext"
	"github.com/fabric-host/fabric/model"
)

// ExportDispatch is the guest export a dispatcher provides: handle one
// batch of completions (DispatchRequest in, ScanResult out). Every plugin
// built with the pdk exports it; the host calls it only on dispatchers.
const ExportDispatch = "fabric_dispatch"

// CompletionsChannel is the Pub/Sub channel FlowFabric's Lua publishes
// terminal flow members on.
const CompletionsChannel = "ff:dag:completions"

// ConfigSweep is the manifest Config key that makes the host also sweep a
// dispatcher's partitions with fabric_scan on its interval_ms, besides
// driving it with completions ("true" to enable; host config may
// override it). Scanners ignore it.
const ConfigSweep = "fabric.sweep"

// Sweeps reports whether a dispatcher asked to be swept too (ConfigSweep).
func (m *Manifest) Sweeps() bool { return m.Kind == KindDispatcher && m.Config[ConfigSweep] == "true" }

// Message tags of this file.
const (
	tagDispatchReq = 0xA3
	tagReadReq     = 0xBB
	tagWriteReq    = 0xBC
	tagCount       = 0xBD
)

// Completion is one ff:dag:completions message: a flow member reached a
// terminal outcome.
type Completion struct {
	ExecutionID string `json:"execution_id"`
	FlowID      string `json:"flow_id"`
	Outcome     string `json:"outcome"`
}

// DispatchRequest is the input of fabric_dispatch: a batch of completions
// in arrival order.
type DispatchRequest struct {
	// Batch numbers the host's dispatch batches, starting at 1.
	Batch uint64
	// Completions are the completions of this batch (at most BatchSize).
	Completions []Completion
	// DeadlineMs is the call's budget in milliseconds.
	DeadlineMs uint32
	// Partitions are the host's partition counts (a flow's partition is
	// crc16(flow uuid) mod Partitions.Flow).
	Partitions model.PartitionConfig
}

// MarshalBinary encodes the request.
func (r *DispatchRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 16+96*len(r.Completions)))
	e.Byte(tagDispatchReq)
	e.Uvarint(r.Batch)
	e.Uvarint(uint64(len(r.Completions)))
	for _, c := range r.Completions {
		e.String(c.ExecutionID)
		e.String(c.FlowID)
		e.String(c.Outcome)
	}
	e.Uvarint(uint64(r.DeadlineMs))
	e.Uvarint(uint64(r.Partitions.Flow))
	e.Uvarint(uint64(r.Partitions.Budget))
	e.Uvarint(uint64(r.Partitions.Quota))
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *DispatchRequest) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagDispatchReq, "dispatch request"); err != nil {
		return err
	}
	var out DispatchRequest
	out.Batch = d.Uvarint()
	// A completion is at least its three string lengths.
	out.Completions = decodeList(d, 3, func(d *Decoder) Completion {
		return Completion{ExecutionID: d.String(), FlowID: d.String(), Outcome: d.String()}
	})
	out.DeadlineMs = d.Uint32()
	out.Partitions.Flow = uint16(d.Uvarint())
	out.Partitions.Budget = uint16(d.Uvarint())
	out.Partitions.Quota = uint16(d.Uvarint())
	if err := d.Finish("dispatch request"); err != nil {
		return err
	}
	*r = out
	return nil
}

// Read operations of the read host function. Each names one key; Args
// are the command's other arguments.
const (
	// ReadSRandMember: SRANDMEMBER key count → members.
	ReadSRandMember = "SRANDMEMBER"
	// ReadSCard: SCARD key → one decimal element.
	ReadSCard = "SCARD"
	// ReadExists: EXISTS key → "1" or "0".
	ReadExists = "EXISTS"
	// ReadHGetAll: HGETALL key → field, value, field, value...
	ReadHGetAll = "HGETALL"
	// ReadGet: GET key → no element when nil, else one.
	ReadGet = "GET"
)

// Write operations of the write host function; each answers an integer
// (SET answers 1).
const (
	WriteHSet             = "HSET"
	WriteHDel             = "HDEL"
	WriteSRem             = "SREM"
	WriteZRem             = "ZREM"
	WriteDel              = "DEL"
	WriteSet              = "SET"
	WriteZRemRangeByScore = "ZREMRANGEBYSCORE"
)

var readArgs = map[string][2]int{ // op → min, max extra args (-1: any)
	ReadSRandMember: {1, 1}, ReadSCard: {0, 0}, ReadExists: {0, 0}, ReadHGetAll: {0, 0}, ReadGet: {0, 0},
}

var writeArgs = map[string][2]int{
	WriteHSet: {2, -1}, WriteHDel: {1, -1}, WriteSRem: {1, -1}, WriteZRem: {1, -1},
	WriteDel: {0, 0}, WriteSet: {1, 1}, WriteZRemRangeByScore: {2, 2},
}

func checkOp(table map[string][2]int, what, op, key string, args []string) error {
	lim, ok := table[op]
	if !ok {
		names := make([]string, 0, len(table))
		for k := range table {
			names = append(names, k)
		}
		return errors.New(what + ": unknown op " + errtext.Q(op) + " (want one of " + strings.Join(names, " ") + ")")
	}
	if key == "" {
		return errors.New(what + " " + op + ": empty key")
	}
	if len(args) < lim[0] || (lim[1] >= 0 && len(args) > lim[1]) {
		return errors.New(what + " " + op + ": " + errtext.D(len(args)) + " arguments")
	}
	if op == WriteHSet && len(args)%2 != 0 {
		return errors.New(what + " HSET: odd field/value list")
	}
	return nil
}

// CommandRequest is the request of the read and write host functions: one
// allow-listed command on one key.
type CommandRequest struct {
	Op   string
	Key  string
	Args []string
	tag  byte
}

// ReadRequest returns a read host-function request.
func ReadRequest(op, key string, args ...string) *CommandRequest {
	return &CommandRequest{Op: op, Key: key, Args: args, tag: tagReadReq}
}

// WriteRequest returns a write host-function request.
func WriteRequest(op, key string, args ...string) *CommandRequest {
	return &CommandRequest{Op: op, Key: key, Args: args, tag: tagWriteReq}
}

// IsWrite reports whether the request is for the write host function.
func (r *CommandRequest) IsWrite() bool { return r.tag == tagWriteReq }

// Validate checks the op is allow-listed and the arity fits.
func (r *CommandRequest) Validate() error {
	if r.IsWrite() {
		return checkOp(writeArgs, "write", r.Op, r.Key, r.Args)
	}
	return checkOp(readArgs, "read", r.Op, r.Key, r.Args)
}

// MarshalBinary encodes the request.
func (r *CommandRequest) MarshalBinary() ([]byte, error) {
	tag := r.tag
	if tag == 0 {
		tag = tagReadReq
	}
	e := NewEncoder(nil)
	e.Byte(tag)
	e.String(r.Op)
	e.String(r.Key)
	e.Strings(r.Args)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a read or write request.
func (r *CommandRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *CommandRequest) decodeFrom(d *Decoder) error {
	tag := d.Byte()
	if d.Err() == nil && tag != tagReadReq && tag != tagWriteReq {
		return errtext.Wrap(ErrDecode, "command request: "+ErrDecode.Error()+": tag 0x"+errtext.Hex2(tag))
	}
	out := CommandRequest{tag: tag, Op: d.String(), Key: d.String(), Args: d.Strings()}
	if err := d.Finish("command request"); err != nil {
		return err
	}
	*r = out
	return nil
}

// Count is an integer reply (the write host function).
type Count struct{ N int64 }

// MarshalBinary encodes the count.
func (r *Count) MarshalBinary() ([]byte, error) {
	e := NewEncoder(nil)
	e.Byte(tagCount)
	e.Varint(r.N)
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a count.
func (r *Count) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagCount, "count"); err != nil {
		return err
	}
	n := d.Varint()
	if err := d.Finish("count"); err != nil {
		return err
	}
	r.N = n
	return nil
}
