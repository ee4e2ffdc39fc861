package host

import (
	"context"
	"log/slog"

	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/startstop"
)

// leaseService keeps this host's partition leases: Start takes the
// host's share before it returns (a lone host owns everything from its
// first sweep), then renews in the background until Stop, which releases
// every lease so peers take over at once.
//
// # Notes
//
//   - Only Stop ends the renewals, not the end of Start's ctx (which
//     bounds the first step): plugin loops outlive their context during
//     shutdown, and a call in flight must not outlive the lease it runs
//     under. Stop it after every loop stopped.
type leaseService struct {
	startstop.Base

	m      *partlease.Manager
	logger *slog.Logger
}

// Start takes the first share (bounded by the lease TTL and ctx), then
// renews in the background until Stop.
func (s *leaseService) Start(ctx context.Context) error {
	first := ctx
	ctx, ok, started, stopped := s.StartInit(context.WithoutCancel(ctx))
	if !ok {
		return nil
	}
	ttl := s.m.Config().TTL
	fctx, cancel := context.WithTimeout(first, ttl)
	if _, err := s.m.RunOnce(fctx); err != nil {
		s.logger.Warn("first partition lease step failed; partitions are scanned once leases are held", "host", s.m.HostID(), "error", err)
	}
	cancel()
	go func() {
		defer stopped()
		started()
		s.m.Run(ctx)
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), ttl/2)
		defer lcancel()
		if err := s.m.Leave(lctx); err != nil {
			s.logger.Warn("partition leases not released", "host", s.m.HostID(), "error", err)
		}
	}()
	return nil
}
