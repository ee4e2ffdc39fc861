package hostfn

import (
	"context"
	"fmt"
	"strconv"

	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
)

// Store is the backend the host functions read and call through.
type Store interface {
	FCallBatch(ctx context.Context, calls []valkey.Call) []valkey.Result
	HMGet(ctx context.Context, key string, fields []string) ([]abi.Field, error)
	ZRangeByScore(ctx context.Context, req abi.ZRangeRequest) (abi.Members, error)
	SMembers(ctx context.Context, key string) ([]string, error)
	SScan(ctx context.Context, req abi.ScanCursorRequest) (abi.ScanCursorResponse, error)
}

// ValkeyStore is Store on a *valkey.Client.
type ValkeyStore struct{ C *valkey.Client }

// FCallBatch pipelines calls (valkey-go DoMulti).
func (s ValkeyStore) FCallBatch(ctx context.Context, calls []valkey.Call) []valkey.Result {
	return s.C.FCallBatch(ctx, calls)
}

// HMGet runs HMGET.
func (s ValkeyStore) HMGet(ctx context.Context, key string, fields []string) ([]abi.Field, error) {
	r := s.C.Raw()
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
func (s ValkeyStore) ZRangeByScore(ctx context.Context, req abi.ZRangeRequest) (abi.Members, error) {
	r := s.C.Raw()
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
func (s ValkeyStore) SMembers(ctx context.Context, key string) ([]string, error) {
	r := s.C.Raw()
	ms, err := r.Do(ctx, r.B().Smembers().Key(key).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("smembers %s: %w", key, err)
	}
	return ms, nil
}

// SScan runs SSCAN.
func (s ValkeyStore) SScan(ctx context.Context, req abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	r := s.C.Raw()
	cur, err := strconv.ParseUint(req.Cursor, 10, 64)
	if err != nil {
		return abi.ScanCursorResponse{}, abi.Errorf(abi.CodeBadRequest, "sscan cursor "+strconv.Quote(req.Cursor))
	}
	b := r.B().Sscan().Key(req.Key).Cursor(cur)
	var res valkeygo.ValkeyResult
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

// StoreOf is the Store of a backend client: a ValkeyStore on a non-nil
// *valkey.Client, nil for anything else. It lets the host default its
// Store without naming the driver.
func StoreOf(b any) Store {
	if c, ok := b.(*valkey.Client); ok && c != nil {
		return ValkeyStore{C: c}
	}
	return nil
}

// FCall runs calls through s in one pipeline and returns their results
// as the fcall host function reports them (no failure tracker, no
// capability check): the path of trusted native callers.
func FCall(ctx context.Context, s Store, calls []abi.Call) []abi.CallResult {
	vc := make([]valkey.Call, len(calls))
	for i, c := range calls {
		vc[i] = valkey.Call{Function: c.Function, Keys: c.Keys, Args: c.Args}
	}
	out := make([]abi.CallResult, len(calls))
	for i, r := range s.FCallBatch(ctx, vc) {
		out[i] = callResult(r)
	}
	return out
}
