package hostfn

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
)

func fcallHandler(cfg Config) handler {
	return handler{
		decode: func(in []byte) (any, subjects, error) {
			var req abi.FCallRequest
			if err := req.UnmarshalBinary(in); err != nil {
				return nil, subjects{}, err
			}
			var s subjects
			for _, c := range req.Calls {
				s.functions = append(s.functions, c.Function)
				s.keys = append(s.keys, c.Keys...)
			}
			return &req, s, nil
		},
		run: func(ctx context.Context, c *Caller, r any) ([]byte, error) {
			req := r.(*abi.FCallRequest)
			if len(req.Calls) > cfg.MaxCalls {
				return nil, abi.Errorf(abi.CodeLimit, fmt.Sprintf("fcall batch of %d exceeds %d", len(req.Calls), cfg.MaxCalls))
			}
			if cfg.Store == nil {
				return nil, errNoStore
			}
			resp := abi.FCallResponse{Results: make([]abi.CallResult, len(req.Calls))}
			calls := make([]valkey.Call, 0, len(req.Calls))
			idx := make([]int, 0, len(req.Calls))
			for i, call := range req.Calls {
				if call.Item != "" && c.Tracker != nil && c.Tracker.ShouldSkip(call.Item) {
					resp.Results[i] = abi.CallResult{Result: abi.StatusSkipped}
					continue
				}
				vc := valkey.Call{Function: call.Function, Keys: call.Keys, Args: call.Args}
				if c.Actions != nil && abi.Mutates(call.Function) {
					if c.dryRun() {
						c.Actions.add(fcallAction(vc))
						resp.Results[i] = abi.CallResult{Result: abi.StatusDryRun}
						continue
					}
					c.Actions.add(fcallAction(vc))
				}
				calls = append(calls, vc)
				idx = append(idx, i)
			}
			if len(calls) == 0 {
				return resp.MarshalBinary()
			}
			replied := c.fcallSent(calls)
			results := cfg.Store.FCallBatch(ctx, calls)
			for _, f := range replied {
				f()
			}
			for j, res := range results {
				i := idx[j]
				resp.Results[i] = callResult(res)
				if item := req.Calls[i].Item; item != "" && c.Tracker != nil {
					if resp.Results[i].OK() {
						c.Tracker.RecordSuccess(item)
					} else {
						c.Tracker.RecordFailure(item)
					}
				}
			}
			return resp.MarshalBinary()
		},
	}
}

func callResult(r valkey.Result) abi.CallResult {
	var le *valkey.LuaError
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

// fcallSent tells OnFCall of an FCALL batch about to be sent, once per
// partition it is for (the selected one; with the whole batch selected,
// each partition its calls' first keys name), and returns the funcs to
// call once the replies are in.
func (c *Caller) fcallSent(calls []valkey.Call) []func() {
	if c.OnFCall == nil || len(calls) == 0 {
		return nil
	}
	tags := []string{c.Tag}
	if c.WholeBatch {
		tags = tags[:0]
		for _, call := range calls {
			if len(call.Keys) == 0 {
				continue
			}
			if t := abi.HashTag(call.Keys[0]); t != "" && !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		}
	}
	var out []func()
	for _, t := range tags {
		if f := c.OnFCall(t); f != nil {
			out = append(out, f)
		}
	}
	return out
}
