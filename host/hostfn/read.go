package hostfn

import (
	"context"
	"errors"

	"github.com/fabric-host/fabric/abi"
)

func hmgetHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.HMGetRequest
			if err := in.decode(&req); err != nil {
				return nil, subjects{}, err
			}
			return &req, subjects{reads: []string{req.Key}, keys: []string{req.Key}}, nil
		},
		run: func(ctx context.Context, _ *Caller, r any) ([]byte, error) {
			req := r.(*abi.HMGetRequest)
			if cfg.Store == nil {
				return nil, errNoStore
			}
			if len(req.Fields) == 0 {
				return nil, abi.Errorf(abi.CodeBadRequest, "hmget needs at least one field")
			}
			vals, err := cfg.Store.HMGet(ctx, req.Key, req.Fields)
			if err != nil {
				return nil, err
			}
			resp := abi.HMGetResponse{Values: vals}
			return resp.MarshalBinary()
		},
	}
}

func zrangeHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.ZRangeRequest
			if err := in.decode(&req); err != nil {
				return nil, subjects{}, err
			}
			if req.Count == 0 {
				return nil, subjects{}, errors.New("zrangebyscore needs a LIMIT count > 0")
			}
			return &req, subjects{reads: []string{req.Key}, keys: []string{req.Key}}, nil
		},
		run: func(ctx context.Context, _ *Caller, r any) ([]byte, error) {
			if cfg.Store == nil {
				return nil, errNoStore
			}
			m, err := cfg.Store.ZRangeByScore(ctx, *r.(*abi.ZRangeRequest))
			if err != nil {
				return nil, err
			}
			return m.MarshalBinary()
		},
	}
}

func smembersHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.KeyRequest
			if err := in.decode(&req); err != nil {
				return nil, subjects{}, err
			}
			return &req, subjects{reads: []string{req.Key}, keys: []string{req.Key}}, nil
		},
		run: func(ctx context.Context, _ *Caller, r any) ([]byte, error) {
			if cfg.Store == nil {
				return nil, errNoStore
			}
			ms, err := cfg.Store.SMembers(ctx, r.(*abi.KeyRequest).Key)
			if err != nil {
				return nil, err
			}
			m := abi.Members{Members: ms}
			return m.MarshalBinary()
		},
	}
}

func sscanHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.ScanCursorRequest
			if err := in.decode(&req); err != nil {
				return nil, subjects{}, err
			}
			if req.Count == 0 {
				return nil, subjects{}, errors.New("sscan needs a COUNT > 0")
			}
			return &req, subjects{reads: []string{req.Key}, keys: []string{req.Key}}, nil
		},
		run: func(ctx context.Context, _ *Caller, r any) ([]byte, error) {
			if cfg.Store == nil {
				return nil, errNoStore
			}
			resp, err := cfg.Store.SScan(ctx, *r.(*abi.ScanCursorRequest))
			if err != nil {
				return nil, err
			}
			return resp.MarshalBinary()
		},
	}
}
