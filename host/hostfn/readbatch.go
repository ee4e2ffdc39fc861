package hostfn

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
)

// BatchReadStore is the optional part of Store that serves the read host
// function (a pipelined batch of read-only commands). A Store without it
// answers CodeUnavailable.
type BatchReadStore interface {
	ReadBatch(ctx context.Context, ops []abi.ReadOp) []abi.ReadResult
}

// maxReadOps caps one read batch.
const maxReadOps = 10000

func readHandler(cfg Config) handler {
	return handler{
		decode: func(in []byte) (any, subjects, error) {
			var req abi.BatchReadRequest
			if err := req.UnmarshalBinary(in); err != nil {
				return nil, subjects{}, err
			}
			if len(req.Ops) == 0 {
				return nil, subjects{}, fmt.Errorf("empty read batch")
			}
			var s subjects
			for _, o := range req.Ops {
				if !abi.ValidBatchReadCommand(o.Cmd) {
					return nil, subjects{}, fmt.Errorf("read: command %q is not one of %v", o.Cmd, abi.BatchReadCommands)
				}
				s.reads = append(s.reads, o.Key)
				s.keys = append(s.keys, o.Key)
				for _, p := range o.Patterns() {
					if t := abi.HashTag(p); t == "" || t != abi.HashTag(o.Key) {
						return nil, subjects{}, fmt.Errorf("read: %s pattern %q is not on the hash tag of %q", o.Cmd, p, o.Key)
					}
					s.reads = append(s.reads, p)
					s.keys = append(s.keys, p)
				}
			}
			return &req, s, nil
		},
		run: func(ctx context.Context, _ *Caller, r any) ([]byte, error) {
			req := r.(*abi.BatchReadRequest)
			if len(req.Ops) > maxReadOps {
				return nil, abi.Errorf(abi.CodeLimit, fmt.Sprintf("read batch of %d exceeds %d", len(req.Ops), maxReadOps))
			}
			rs, ok := cfg.Store.(BatchReadStore)
			if cfg.Store == nil || !ok {
				return nil, errNoStore
			}
			resp := abi.BatchReadResponse{Results: rs.ReadBatch(ctx, req.Ops)}
			return resp.MarshalBinary()
		},
	}
}

// ReadBatch pipelines ops (valkey-go DoMulti) and flattens each reply.
func (s ValkeyStore) ReadBatch(ctx context.Context, ops []abi.ReadOp) []abi.ReadResult {
	r := s.C.Raw()
	cmds := make(valkeygo.Commands, len(ops))
	for i, o := range ops {
		cmds[i] = r.B().Arbitrary(o.Cmd).Keys(o.Key).Args(o.Args...).Build()
	}
	out := make([]abi.ReadResult, len(ops))
	for i, res := range r.DoMulti(ctx, cmds...) {
		msg, err := res.ToMessage()
		if err != nil && !valkeygo.IsValkeyNil(err) {
			out[i].Err = fmt.Sprintf("%s %s: %v", ops[i].Cmd, ops[i].Key, err)
			continue
		}
		flatten(&out[i], msg)
	}
	return out
}

// flatten appends a reply's values to res (see abi.ReadResult).
func flatten(res *abi.ReadResult, m valkeygo.ValkeyMessage) {
	add := func(v string, ok bool) {
		res.Values = append(res.Values, v)
		res.Present = append(res.Present, ok)
	}
	switch {
	case m.IsNil():
		add("", false)
	case m.IsInt64():
		v, _ := m.AsInt64()
		add(strconv.FormatInt(v, 10), true)
	case m.IsMap():
		mm, err := m.AsStrMap()
		if err != nil {
			res.Err = err.Error()
			return
		}
		keys := make([]string, 0, len(mm))
		for k := range mm {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add(k, true)
			add(mm[k], true)
		}
	case m.IsArray():
		arr, _ := m.ToArray()
		for _, e := range arr {
			if e.IsNil() {
				add("", false)
				continue
			}
			if e.IsArray() || e.IsMap() {
				flatten(res, e) // RESP3 pairs (ZRANGE … WITHSCORES): member, score, …
				continue
			}
			v, err := e.ToString()
			if err != nil {
				if n, ierr := e.AsInt64(); ierr == nil {
					v = strconv.FormatInt(n, 10)
				}
			}
			add(v, true)
		}
	default:
		v, err := m.ToString()
		if err != nil {
			if f, ferr := m.AsFloat64(); ferr == nil {
				v = strconv.FormatFloat(f, 'f', -1, 64)
			} else {
				res.Err = err.Error()
				return
			}
		}
		add(v, true)
	}
}
