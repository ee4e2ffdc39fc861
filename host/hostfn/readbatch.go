package hostfn

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend"
)

// BatchReadStore is the optional part of Store that serves the read host
// function (a pipelined batch of read-only commands). A Store without it
// answers CodeUnavailable.
type BatchReadStore = backend.PluginReadBatch

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
			rs, ok := cfg.Store.(BatchReadStore)
			if cfg.Store == nil || !ok {
				return nil, errNoStore
			}
			resp := abi.BatchReadResponse{Results: rs.ReadBatch(ctx, req.Ops)}
			return resp.MarshalBinary()
		},
	}
}
