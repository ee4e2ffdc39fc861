package partlease

import (
	"context"
	"reflect"
	"time"

	"github.com/fabric-host/fabric/backend"
)

// Backend is what a Manager needs of its backend: the host registry
// (heartbeat, leave, the hosts-changed channel) and the partition-lease
// claims, in the backend contract's types. *valkey.Client implements it;
// this package names no driver.
type Backend interface {
	HostHeartbeat(ctx context.Context, hostID string, ttl time.Duration) (int64, []backend.HostMember, error)
	HostLeave(ctx context.Context, hostID string) error
	PublishHostsChanged(ctx context.Context, event, hostID string) error
	ClaimPartitions(ctx context.Context, hostID string, ttl time.Duration, claims []backend.PartitionClaim) []backend.PartitionClaimResult
	ReleasePartitions(ctx context.Context, hostID string, leases []backend.PartitionClaim) []error
	// SubscribeChannel holds one subscription to channel (here
	// backend.HostsChannel) on a dedicated connection named connName
	// until it breaks or ctx ends, calling onMessage with every message;
	// onSubscribed may be nil.
	SubscribeChannel(ctx context.Context, channel, connName string, onMessage func(msg string), onSubscribed func()) (bool, error)
}

// isNil reports a typed nil pointer in the interface (a nil
// *valkey.Client).
func isNil(c Backend) bool {
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
