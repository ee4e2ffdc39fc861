package hostfn

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
)

// CommandStore is the optional part of Store serving the read and write
// host functions (ABI 1.1). A Store without it answers CodeUnavailable.
type CommandStore interface {
	// Read runs one validated abi read op.
	Read(ctx context.Context, req *abi.CommandRequest) ([]string, error)
	// Write runs one validated abi write op.
	Write(ctx context.Context, req *abi.CommandRequest) (int64, error)
}

func commandHandler(cfg Config, write bool) handler {
	return handler{
		decode: func(in []byte) (any, subjects, error) {
			var req abi.CommandRequest
			if err := req.UnmarshalBinary(in); err != nil {
				return nil, subjects{}, err
			}
			if req.IsWrite() != write {
				return nil, subjects{}, fmt.Errorf("%s request sent to the wrong host function", req.Op)
			}
			if err := req.Validate(); err != nil {
				return nil, subjects{}, err
			}
			s := subjects{keys: []string{req.Key}}
			if write {
				s.writes = []string{req.Key}
			} else {
				s.reads = []string{req.Key}
			}
			return &req, s, nil
		},
		run: func(ctx context.Context, c *Caller, r any) ([]byte, error) {
			req := r.(*abi.CommandRequest)
			if write && c.Actions != nil {
				c.Actions.add(writeAction(req))
				if c.dryRun() {
					return nil, abi.Errorf(abi.CodeDryRun, req.Op+" "+req.Key+" recorded by a shadow run, not sent")
				}
			}
			cs, ok := cfg.Store.(CommandStore)
			if !ok {
				return nil, errNoStore
			}
			if write {
				n, err := cs.Write(ctx, req)
				if err != nil {
					return nil, err
				}
				c := abi.Count{N: n}
				return c.MarshalBinary()
			}
			ms, err := cs.Read(ctx, req)
			if err != nil {
				return nil, err
			}
			m := abi.Members{Members: ms}
			return m.MarshalBinary()
		},
	}
}

// Read implements CommandStore.
func (s ValkeyStore) Read(ctx context.Context, req *abi.CommandRequest) ([]string, error) {
	r := s.C.Raw()
	b := r.B()
	switch req.Op {
	case abi.ReadSRandMember:
		n, err := strconv.ParseInt(req.Args[0], 10, 64)
		if err != nil || n <= 0 {
			return nil, abi.Errorf(abi.CodeBadRequest, "srandmember count "+strconv.Quote(req.Args[0]))
		}
		ms, err := r.Do(ctx, b.Srandmember().Key(req.Key).Count(n).Build()).AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("srandmember %s: %w", req.Key, err)
		}
		return ms, nil
	case abi.ReadSCard, abi.ReadExists:
		cmd := b.Scard().Key(req.Key).Build()
		if req.Op == abi.ReadExists {
			cmd = b.Exists().Key(req.Key).Build()
		}
		n, err := r.Do(ctx, cmd).AsInt64()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", req.Op, req.Key, err)
		}
		return []string{strconv.FormatInt(n, 10)}, nil
	case abi.ReadHGetAll:
		m, err := r.Do(ctx, b.Hgetall().Key(req.Key).Build()).AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("hgetall %s: %w", req.Key, err)
		}
		fields := make([]string, 0, len(m))
		for f := range m {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		out := make([]string, 0, 2*len(m))
		for _, f := range fields {
			out = append(out, f, m[f])
		}
		return out, nil
	case abi.ReadGet:
		v, err := r.Do(ctx, b.Get().Key(req.Key).Build()).ToString()
		if valkeygo.IsValkeyNil(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", req.Key, err)
		}
		return []string{v}, nil
	}
	return nil, abi.Errorf(abi.CodeBadRequest, "read op "+req.Op)
}

// Write implements CommandStore.
func (s ValkeyStore) Write(ctx context.Context, req *abi.CommandRequest) (int64, error) {
	r := s.C.Raw()
	b := r.B()
	var res interface{ AsInt64() (int64, error) }
	switch req.Op {
	case abi.WriteHSet:
		fv := b.Hset().Key(req.Key).FieldValue()
		for i := 0; i+1 < len(req.Args); i += 2 {
			fv = fv.FieldValue(req.Args[i], req.Args[i+1])
		}
		res = r.Do(ctx, fv.Build())
	case abi.WriteHDel:
		res = r.Do(ctx, b.Hdel().Key(req.Key).Field(req.Args...).Build())
	case abi.WriteSRem:
		res = r.Do(ctx, b.Srem().Key(req.Key).Member(req.Args...).Build())
	case abi.WriteZRem:
		res = r.Do(ctx, b.Zrem().Key(req.Key).Member(req.Args...).Build())
	case abi.WriteDel:
		res = r.Do(ctx, b.Del().Key(req.Key).Build())
	case abi.WriteSet:
		if err := r.Do(ctx, b.Set().Key(req.Key).Value(req.Args[0]).Build()).Error(); err != nil {
			return 0, fmt.Errorf("set %s: %w", req.Key, err)
		}
		return 1, nil
	case abi.WriteZRemRangeByScore:
		res = r.Do(ctx, b.Zremrangebyscore().Key(req.Key).Min(req.Args[0]).Max(req.Args[1]).Build())
	default:
		return 0, abi.Errorf(abi.CodeBadRequest, "write op "+req.Op)
	}
	n, err := res.AsInt64()
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", req.Op, req.Key, err)
	}
	return n, nil
}

// CallResult converts one FCALL outcome the way the fcall host function
// does (for native pdk.Host implementations).
func CallResult(r valkey.Result) abi.CallResult { return callResult(r) }
