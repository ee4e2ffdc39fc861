package partlease

import (
	"context"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
)

// Backend is what a Manager needs of its backend: the host registry
// (heartbeat, leave, the hosts-changed channel) and the partition-lease
// functions. *valkey.Client implements it.
type Backend interface {
	HostHeartbeat(ctx context.Context, hostID string, ttl time.Duration) (int64, []valkey.HostMember, error)
	HostLeave(ctx context.Context, hostID string) error
	PublishHostsChanged(ctx context.Context, event, hostID string) error
	ClaimPartitions(ctx context.Context, hostID string, ttl time.Duration, claims []valkey.PartitionClaim) []valkey.PartitionClaimResult
	ReleasePartitions(ctx context.Context, hostID string, leases []valkey.PartitionClaim) []error
	// Raw is the connection the hosts-changed subscription runs on.
	Raw() vk.Client
}

var _ Backend = (*valkey.Client)(nil)

// isNil reports a typed nil client (a nil *valkey.Client in the
// interface).
func isNil(c Backend) bool {
	vc, ok := c.(*valkey.Client)
	return ok && vc == nil
}
