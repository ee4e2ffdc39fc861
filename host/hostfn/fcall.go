package hostfn

import (
	"context"
	"fmt"
	"slices"

	"github.com/fabric-host/fabric/abi"
)

func fcallHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.FCallRequest
			if err := in.decode(&req); err != nil {
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
			resp := abi.FCallResponse{}
			// calls is what is sent: req.Calls itself unless a call is
			// skipped or only recorded, then the sent ones, idx[j] the
			// request index of calls[j].
			calls := req.Calls
			var idx []int
			for i := range req.Calls {
				call := &req.Calls[i]
				var held abi.CallStatus // StatusOK: sent
				switch {
				case call.Item != "" && c.Tracker != nil && c.Tracker.ShouldSkip(call.Item):
					held = abi.StatusSkipped
				case c.Actions != nil && abi.Mutates(call.Function):
					c.Actions.add(fcallAction(*call))
					if c.dryRun() {
						held = abi.StatusDryRun
					}
				}
				if held == abi.StatusOK {
					if idx != nil {
						calls = append(calls, *call)
						idx = append(idx, i)
					}
					continue
				}
				if idx == nil { // the first call not sent: send a subset
					resp.Results = make([]abi.CallResult, len(req.Calls))
					calls = make([]abi.Call, 0, len(req.Calls))
					idx = make([]int, 0, len(req.Calls))
					for j := range i {
						calls = append(calls, req.Calls[j])
						idx = append(idx, j)
					}
				}
				resp.Results[i] = abi.CallResult{Result: held}
			}
			if len(calls) == 0 {
				return resp.MarshalBinary()
			}
			replied := c.fcallSent(calls)
			results := cfg.Store.FCallBatch(ctx, calls)
			for _, f := range replied {
				f()
			}
			if idx == nil {
				resp.Results = results
			}
			for j := range results {
				i := j
				if idx != nil {
					i = idx[j]
					resp.Results[i] = results[j]
				}
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

// fcallSent tells OnFCall of an FCALL batch about to be sent, once per
// partition it is for (the selected one; with the whole batch selected,
// each partition its calls' first keys name), and returns the funcs to
// call once the replies are in.
func (c *Caller) fcallSent(calls []abi.Call) []func() {
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
