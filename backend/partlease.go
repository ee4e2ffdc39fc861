package backend

import (
	"errors"

	"github.com/fabric-host/fabric/model"
)

// Partition leases and host membership (fabric's own, not FlowFabric's):
// fabric hosts share a deployment's partitions by holding an expiring
// lease per partition, with a fencing token that grows at every
// acquisition, and announce themselves in a members set. host/partlease
// decides who should own what over these types; a driver stores them.

// HostsChannel carries "<event> <host id>" when a host joins, leaves or
// releases partitions, so peers rebalance at once instead of at their
// next heartbeat.
const HostsChannel = "fabric:hosts:changed"

// ClaimOutcome is what a partition claim did.
type ClaimOutcome string

// Claim outcomes.
const (
	// ClaimAcquired: the lease was free or expired and is now the
	// caller's, under a new token.
	ClaimAcquired ClaimOutcome = "acquired"
	// ClaimRenewed: the caller's live lease was extended, same token.
	ClaimRenewed ClaimOutcome = "renewed"
	// ClaimHeld: another host (or the caller under another token) holds a
	// live lease; nothing changed.
	ClaimHeld ClaimOutcome = "held"
)

// PartitionClaim asks for one partition lease: Token 0 acquires, a token
// renews the lease held under it.
type PartitionClaim struct {
	Partition model.Partition
	Token     int64
}

// PartitionClaimResult is the answer to one PartitionClaim.
type PartitionClaimResult struct {
	Partition model.Partition
	Outcome   ClaimOutcome
	// Owner is the holder (the caller unless Outcome is ClaimHeld).
	Owner string
	// Token is the lease's fencing token; ExpiresAtMs its expiry on the
	// server's clock.
	Token       int64
	ExpiresAtMs int64
	// Err is set when the call failed; the other fields are then empty.
	Err error
}

// ErrNotLeaseOwner is returned when releasing a lease the caller no
// longer holds under the given token (it expired and was taken over).
var ErrNotLeaseOwner = errors.New("partition lease not held by this host under this token")

// HostMember is one live member of the hosts set.
type HostMember struct {
	ID string `json:"id"`
	// ExpiresAtMs is when the member drops out unless it heartbeats, on
	// the server's clock.
	ExpiresAtMs int64 `json:"expires_at_ms"`
}

// PartitionLease is the stored state of one partition lease.
type PartitionLease struct {
	Partition model.Partition
	// Owner is the holder's host id; "" when the lease is free, expired
	// or was never taken.
	Owner string
	// Token is the latest fencing token (0: never taken).
	Token int64
	// ExpiresAtMs is the expiry on the server's clock (0 when free).
	ExpiresAtMs int64
}

// PartitionLeaseTable is every partition lease of the deployment and the
// live hosts, read at one server time.
type PartitionLeaseTable struct {
	NowMs   int64
	Leases  []PartitionLease
	Members []HostMember
}
