package valkey

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/hostseam"
)

// This file is the Valkey side of the host's plugin data: the host
// functions of package host/hostfn read and call through PluginStore,
// which speaks the plugin ABI's types (hostseam.PluginData), so the host
// never names valkey-go.

// PluginStore is hostseam.PluginData, PluginCommands and PluginReadBatch
// on a *Client.
type PluginStore struct{ C *Client }

var (
	_ hostseam.PluginData      = PluginStore{}
	_ hostseam.PluginCommands  = PluginStore{}
	_ hostseam.PluginReadBatch = PluginStore{}
)

// PluginData implements hostseam.PluginDataSource: c's PluginStore (nil
// for a nil c).
func (c *Client) PluginData() hostseam.PluginData {
	if c == nil {
		return nil
	}
	return PluginStore{C: c}
}

// FCallBatch implements hostseam.PluginData: FCallBatch's pipeline, each
// reply decoded straight into an abi.CallResult.
func (s PluginStore) FCallBatch(ctx context.Context, calls []abi.Call) []abi.CallResult {
	return fcallBatch(s.C, ctx, calls, abiCallParts, decodeCallResult, errCallResult)
}

func abiCallParts(c abi.Call) (fn string, keys, args []string) { return c.Function, c.Keys, c.Args }

// decodeCallResult is decodeResult then CallResult, without the *Reply.
func decodeCallResult(fn string, r vk.ValkeyResult) abi.CallResult {
	msg, err := r.ToMessage()
	if err != nil {
		return errCallResult(fmt.Errorf("valkey: FCALL %s: %w", fn, err))
	}
	ok, status, fields, err := replyParts(fn, msg)
	switch {
	case err != nil:
		return errCallResult(err)
	case !ok:
		return abi.CallResult{Result: abi.StatusLuaError, Status: status, Fields: fields}
	}
	return abi.CallResult{Result: abi.StatusOK, Status: status, Fields: fields}
}

func errCallResult(err error) abi.CallResult { return CallResult(Result{Err: err}) }

// CallResult converts one FCallBatch outcome to what the fcall host
// function reports: StatusOK with the reply, StatusLuaError with a
// *LuaError's code and details, StatusError with any other error's text.
func CallResult(r Result) abi.CallResult {
	var le *LuaError
	switch {
	case r.Err == nil && r.Reply != nil:
		return abi.CallResult{Result: abi.StatusOK, Status: r.Reply.Status, Fields: r.Reply.Fields}
	case errors.As(r.Err, &le):
		return abi.CallResult{Result: abi.StatusLuaError, Status: string(le.Code), Fields: le.Details}
	case r.Err != nil:
		return abi.CallResult{Result: abi.StatusError, Status: r.Err.Error()}
	}
	return abi.CallResult{Result: abi.StatusError, Status: "empty reply"}
}

// Read implements hostseam.PluginCommands.
func (s PluginStore) Read(ctx context.Context, req *abi.CommandRequest) ([]string, error) {
	r := s.C.c
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
		if vk.IsValkeyNil(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", req.Key, err)
		}
		return []string{v}, nil
	}
	return nil, abi.Errorf(abi.CodeBadRequest, "read op "+req.Op)
}

// Write implements hostseam.PluginCommands.
func (s PluginStore) Write(ctx context.Context, req *abi.CommandRequest) (int64, error) {
	r := s.C.c
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

// HMGet runs HMGET.
func (s PluginStore) HMGet(ctx context.Context, key string, fields []string) ([]abi.Field, error) {
	r := s.C.c
	arr, err := r.Do(ctx, r.B().Hmget().Key(key).Field(fields...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("hmget %s: %w", key, err)
	}
	out := make([]abi.Field, len(arr))
	for i, m := range arr {
		if m.IsNil() {
			continue
		}
		v, err := m.ToString()
		if err != nil {
			return nil, fmt.Errorf("hmget %s field %d: %w", key, i, err)
		}
		out[i] = abi.Field{Value: v, Present: true}
	}
	return out, nil
}

// ZRangeByScore runs ZRANGEBYSCORE with LIMIT.
func (s PluginStore) ZRangeByScore(ctx context.Context, req abi.ZRangeRequest) (abi.Members, error) {
	r := s.C.c
	b := r.B().Zrangebyscore().Key(req.Key).Min(req.Min).Max(req.Max)
	if req.WithScores {
		res, err := r.Do(ctx, b.Withscores().Limit(int64(req.Offset), int64(req.Count)).Build()).AsZScores()
		if err != nil {
			return abi.Members{}, fmt.Errorf("zrangebyscore %s: %w", req.Key, err)
		}
		out := abi.Members{Members: make([]string, len(res)), Scores: make([]float64, len(res))}
		for i, z := range res {
			out.Members[i], out.Scores[i] = z.Member, z.Score
		}
		return out, nil
	}
	ms, err := r.Do(ctx, b.Limit(int64(req.Offset), int64(req.Count)).Build()).AsStrSlice()
	if err != nil {
		return abi.Members{}, fmt.Errorf("zrangebyscore %s: %w", req.Key, err)
	}
	return abi.Members{Members: ms}, nil
}

// SMembers runs SMEMBERS.
func (s PluginStore) SMembers(ctx context.Context, key string) ([]string, error) {
	r := s.C.c
	ms, err := r.Do(ctx, r.B().Smembers().Key(key).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("smembers %s: %w", key, err)
	}
	return ms, nil
}

// SScan runs SSCAN.
func (s PluginStore) SScan(ctx context.Context, req abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	r := s.C.c
	cur, err := strconv.ParseUint(req.Cursor, 10, 64)
	if err != nil {
		return abi.ScanCursorResponse{}, abi.Errorf(abi.CodeBadRequest, "sscan cursor "+strconv.Quote(req.Cursor))
	}
	b := r.B().Sscan().Key(req.Key).Cursor(cur)
	var res vk.ValkeyResult
	if req.Match != "" {
		res = r.Do(ctx, b.Match(req.Match).Count(int64(req.Count)).Build())
	} else {
		res = r.Do(ctx, b.Count(int64(req.Count)).Build())
	}
	se, err := res.AsScanEntry()
	if err != nil {
		return abi.ScanCursorResponse{}, fmt.Errorf("sscan %s: %w", req.Key, err)
	}
	return abi.ScanCursorResponse{Cursor: strconv.FormatUint(se.Cursor, 10), Members: se.Elements}, nil
}

// ReadBatch pipelines ops (valkey-go DoMulti) and flattens each reply.
func (s PluginStore) ReadBatch(ctx context.Context, ops []abi.ReadOp) []abi.ReadResult {
	r := s.C.c
	cmds := make(vk.Commands, len(ops))
	for i, o := range ops {
		cmds[i] = r.B().Arbitrary(o.Cmd).Keys(o.Key).Args(o.Args...).Build()
	}
	out := make([]abi.ReadResult, len(ops))
	for i, res := range r.DoMulti(ctx, cmds...) {
		msg, err := res.ToMessage()
		if err != nil && !vk.IsValkeyNil(err) {
			out[i].Err = fmt.Sprintf("%s %s: %v", ops[i].Cmd, ops[i].Key, err)
			continue
		}
		flatten(&out[i], msg)
	}
	return out
}

// flatten appends a reply's values to res (see abi.ReadResult).
func flatten(res *abi.ReadResult, m vk.ValkeyMessage) {
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
