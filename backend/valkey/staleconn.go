package valkey

import (
	"context"
	"errors"
	"net"
	"syscall"

	vk "github.com/valkey-io/valkey-go"
)

// staleConnClient is a valkey-go client that sends a command (or a
// pipeline) a second time when the first send failed to be written at all
// because the server had closed the connection. valkey-go keeps idle
// connections without a reader, so after a server restart every idle
// connection learns it is dead only on its next write; without this, one
// command per pooled connection would fail with "broken pipe" although
// the server is back.
//
// A write refused with EPIPE or ECONNRESET never reached a live server,
// so sending it again cannot run it twice. A failure after the write (EOF
// while reading the reply) is ambiguous and is returned as is. Each
// refused send retires one dead connection (valkey-go replaces it), and a
// client holds several, so a send is tried up to staleConnSends times.
type staleConnClient struct {
	vk.Client
}

// staleConnSends bounds the sends of one command or pipeline.
const staleConnSends = 16

// Do implements vk.Client.
func (s staleConnClient) Do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	r := s.Client.Do(ctx, cmd)
	for n := 1; n < staleConnSends && isUnwritten(r.NonValkeyError()) && ctx.Err() == nil; n++ {
		r = s.Client.Do(ctx, cmd)
	}
	return r
}

// DoMulti implements vk.Client. A pipeline is sent again only when none
// of it was written (every reply carries the write error).
func (s staleConnClient) DoMulti(ctx context.Context, multi ...vk.Completed) []vk.ValkeyResult {
	rs := s.Client.DoMulti(ctx, multi...)
	for n := 1; n < staleConnSends && allUnwritten(rs) && ctx.Err() == nil; n++ {
		rs = s.Client.DoMulti(ctx, multi...)
	}
	return rs
}

func allUnwritten(rs []vk.ValkeyResult) bool {
	for _, r := range rs {
		if !isUnwritten(r.NonValkeyError()) {
			return false
		}
	}
	return len(rs) > 0
}

// isUnwritten reports a connection error raised by the write itself
// because the peer had gone.
func isUnwritten(err error) bool {
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Op != "write" {
		return false
	}
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}
