package hostfn

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/hostseam"
)

// BatchReadStore is the optional part of Store that serves the read host
// function (a pipelined batch of read-only commands). A Store without it
// answers CodeUnavailable.
type BatchReadStore = hostseam.PluginReadBatch

// maxReadOps caps one read batch.
const maxReadOps = 10000

func readHandler(cfg Config) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.BatchReadRequest
			if err := in.decode(&req); err != nil {
				return nil, subjects{}, err
			}
			if len(req.Ops) == 0 {
				return nil, subjects{}, fmt.Errorf("empty read batch")
			}
			if len(req.Ops) > maxReadOps {
				return nil, subjects{}, abi.Errorf(abi.CodeLimit, fmt.Sprintf("read batch of %d exceeds %d", len(req.Ops), maxReadOps))
			}
			var s subjects
			for _, o := range req.Ops {
				keys, patterns, err := readOpSubjects(o)
				if err != nil {
					return nil, subjects{}, err
				}
				s.reads = append(s.reads, keys...)
				s.keys = append(s.keys, keys...)
				s.patterns = append(s.patterns, patterns...)
			}
			return &req, s, nil
		},
		run: func(ctx context.Context, _ *Caller, r any) ([]byte, error) {
			req := r.(*abi.BatchReadRequest)
			rs, ok := cfg.Store.(BatchReadStore)
			if cfg.Store == nil || !ok {
				return nil, errNoStore
			}
			resp := abi.BatchReadResponse{Results: rs.ReadBatch(ctx, req.Ops)}
			return resp.MarshalBinary()
		},
	}
}
