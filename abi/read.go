package abi

import (
	"errors"
	"strings"

	"github.com/fabric-host/fabric/internal/errtext"
)

// Message tags of the read_batch host function.
const (
	tagBatchReadReq  = 0xBE
	tagBatchReadResp = 0xBF
)

// ReadOp is one read-only command of a read batch. Cmd is one of
// BatchReadCommands; Args follow the key (fields of HMGET, bounds of ZCOUNT...).
type ReadOp struct {
	Cmd  string
	Key  string
	Args []string
}

// BatchReadCommands are the commands a read batch may run: read-only, each
// key checked against the plugin's read grant and partition. All but
// SORT_RO read their one key; SORT_RO also reads the keys its BY and GET
// patterns form (ReadOp.Patterns), which must carry its key's hash tag
// (one slot, as Valkey Cluster requires of SORT patterns): a set of ids and
// a field of the hash each id names, in one command
// (SORT_RO set BY nosort GET # GET prefix:*->field).
var BatchReadCommands = []string{"GET", "HGET", "HMGET", "HGETALL", "EXISTS", "ZSCORE", "ZCARD", "ZCOUNT", "SCARD", "SISMEMBER", "SMEMBERS", "ZRANGE", "SORT_RO"}

// Patterns returns the key patterns o reads beside its key: the BY and
// GET patterns of a SORT_RO, each cut at "->" (the hash field it reads),
// without GET # (the element itself) and BY patterns without "*" (no
// sort, no read). Nil for every other command.
func (o ReadOp) Patterns() []string {
	if o.Cmd != "SORT_RO" {
		return nil
	}
	var out []string
	for i := 0; i+1 < len(o.Args); i++ {
		opt, p := o.Args[i], o.Args[i+1]
		switch {
		case strings.EqualFold(opt, "LIMIT"):
			i += 2
			continue
		case strings.EqualFold(opt, "BY") && !strings.Contains(p, "*"),
			strings.EqualFold(opt, "GET") && p == "#":
		case strings.EqualFold(opt, "BY"), strings.EqualFold(opt, "GET"):
			if k, _, ok := strings.Cut(p, "->"); ok {
				p = k
			}
			out = append(out, p)
		default:
			continue // ASC, DESC, ALPHA
		}
		i++
	}
	return out
}

// ValidBatchReadCommand reports whether cmd may appear in a read batch.
func ValidBatchReadCommand(cmd string) bool {
	for _, c := range BatchReadCommands {
		if c == cmd {
			return true
		}
	}
	return false
}

// BatchReadRequest is the request of the read_batch host function: commands run in
// one pipelined round trip.
type BatchReadRequest struct{ Ops []ReadOp }

// MarshalBinary encodes the request.
func (r *BatchReadRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 48*len(r.Ops)+4))
	e.Byte(tagBatchReadReq)
	e.Uvarint(uint64(len(r.Ops)))
	for _, o := range r.Ops {
		e.String(o.Cmd)
		e.String(o.Key)
		e.Strings(o.Args)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *BatchReadRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *BatchReadRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagBatchReadReq, "read request"); err != nil {
		return err
	}
	// An op is at least 3 bytes: two string lengths and an args count.
	ops := decodeList(d, 3, func(d *Decoder) ReadOp {
		return ReadOp{Cmd: d.String(), Key: d.String(), Args: d.Strings()}
	})
	if err := d.Finish("read request"); err != nil {
		return err
	}
	r.Ops = ops
	return nil
}

// ReadResult is the reply of one ReadOp, flattened to strings: a scalar is
// one value, an integer its decimal form, an array its elements, a map its
// field/value pairs. Present is parallel to Values: false for a nil (a
// missing key or field). Err is set (and Values empty) when the command
// failed.
type ReadResult struct {
	Err     string
	Values  []string
	Present []bool
}

// Value returns the first value and whether it is present.
func (r ReadResult) Value() (string, bool) {
	if r.Err != "" || len(r.Values) == 0 || !r.Present[0] {
		return "", false
	}
	return r.Values[0], true
}

// Map returns field/value pairs (HGETALL) as a map.
func (r ReadResult) Map() map[string]string {
	m := make(map[string]string, len(r.Values)/2)
	for i := 0; i+1 < len(r.Values); i += 2 {
		m[r.Values[i]] = r.Values[i+1]
	}
	return m
}

// BatchReadResponse is the response of read, one result per op in order.
type BatchReadResponse struct{ Results []ReadResult }

// MarshalBinary encodes the response.
func (r *BatchReadResponse) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 32*len(r.Results)+4))
	e.Byte(tagBatchReadResp)
	e.Uvarint(uint64(len(r.Results)))
	for _, res := range r.Results {
		if len(res.Present) != len(res.Values) {
			return nil, errors.New("read response: " + errtext.D(len(res.Values)) + " values, " + errtext.D(len(res.Present)) + " presence flags")
		}
		e.String(res.Err)
		e.Uvarint(uint64(len(res.Values)))
		for i, v := range res.Values {
			e.Bool(res.Present[i])
			e.String(v)
		}
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a response.
func (r *BatchReadResponse) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagBatchReadResp, "read response"); err != nil {
		return err
	}
	// A result is at least an error string's length and a values count;
	// a value at least its presence flag and its length.
	out := decodeList(d, 2, func(d *Decoder) ReadResult {
		res := ReadResult{Err: d.String()}
		fields := decodeList(d, 2, func(d *Decoder) Field {
			present := d.Bool()
			return Field{Present: present, Value: d.String()}
		})
		res.Values = make([]string, len(fields))
		res.Present = make([]bool, len(fields))
		for j, f := range fields {
			res.Values[j], res.Present[j] = f.Value, f.Present
		}
		return res
	})
	if err := d.Finish("read response"); err != nil {
		return err
	}
	r.Results = out
	return nil
}
