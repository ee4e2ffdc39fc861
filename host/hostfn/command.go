package hostfn

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/hostseam"
)

// CommandStore is the optional part of Store serving the read and write
// host functions (ABI 1.1). A Store without it answers CodeUnavailable.
type CommandStore = hostseam.PluginCommands

func commandHandler(cfg Config, write bool) handler {
	return handler{
		decode: func(in *request) (any, subjects, error) {
			var req abi.CommandRequest
			if err := in.decode(&req); err != nil {
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
