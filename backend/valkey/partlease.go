package valkey

import (
	"context"
	"fmt"
	"strconv"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Partition leases and host membership (fabric's own library, not
// FlowFabric's): fabric hosts share a deployment's partitions by holding
// an expiring lease per partition, with a fencing token that grows at
// every acquisition, and announce themselves in a members zset. The logic
// that decides who should own what is host/partlease; these are the typed
// calls it makes.
const (
	// PartitionLeasePrefix starts every partition lease key; the
	// partition's hash tag follows, so the lease lives on the partition's
	// slot: fabric:partlease:{fp:7}.
	PartitionLeasePrefix = "fabric:partlease:"
	// HostsKey is the members zset: host id → expiry (server ms).
	HostsKey = "fabric:hosts"
	// HostsChannel is backend.HostsChannel.
	HostsChannel = backend.HostsChannel
)

// PartitionLeaseKey returns the lease key of p.
func PartitionLeaseKey(p model.Partition) string { return PartitionLeasePrefix + p.Tag() }

// The partition-lease types are the backend contract's (package backend);
// these names keep the driver's callers unchanged.
type (
	// ClaimOutcome is backend.ClaimOutcome.
	ClaimOutcome = backend.ClaimOutcome
	// PartitionClaim is backend.PartitionClaim.
	PartitionClaim = backend.PartitionClaim
	// PartitionClaimResult is backend.PartitionClaimResult.
	PartitionClaimResult = backend.PartitionClaimResult
	// HostMember is backend.HostMember.
	HostMember = backend.HostMember
	// PartitionLease is backend.PartitionLease.
	PartitionLease = backend.PartitionLease
	// PartitionLeaseTable is backend.PartitionLeaseTable.
	PartitionLeaseTable = backend.PartitionLeaseTable
)

// Claim outcomes (backend's).
const (
	ClaimAcquired = backend.ClaimAcquired
	ClaimRenewed  = backend.ClaimRenewed
	ClaimHeld     = backend.ClaimHeld
)

// ClaimPartitions acquires or renews leases of ttl for hostID, one
// fabric_claim_partition per claim, pipelined in one round trip.
func (c *Client) ClaimPartitions(ctx context.Context, hostID string, ttl time.Duration, claims []PartitionClaim) []PartitionClaimResult {
	const fn = "fabric_claim_partition"
	calls := make([]Call, len(claims))
	ttlMs := strconv.FormatInt(max(1, ttl.Milliseconds()), 10)
	for i, cl := range claims {
		held := ""
		if cl.Token > 0 {
			held = strconv.FormatInt(cl.Token, 10)
		}
		calls[i] = Call{Function: fn, Keys: []string{PartitionLeaseKey(cl.Partition)}, Args: []string{hostID, ttlMs, held}}
	}
	out := make([]PartitionClaimResult, len(claims))
	for i, r := range c.FCallBatch(ctx, calls) {
		out[i] = parsePartitionClaim(claims[i].Partition, hostID, r)
	}
	return out
}

func parsePartitionClaim(p model.Partition, hostID string, r Result) PartitionClaimResult {
	res := PartitionClaimResult{Partition: p}
	if r.Err != nil {
		res.Err = r.Err
		return res
	}
	rep := r.Reply
	var err error
	switch ClaimOutcome(rep.Field(0)) {
	case ClaimAcquired, ClaimRenewed:
		res.Outcome, res.Owner = ClaimOutcome(rep.Field(0)), hostID
		if res.Token, err = rep.Int(1); err == nil {
			res.ExpiresAtMs, err = rep.Int(2)
		}
	case ClaimHeld:
		res.Outcome, res.Owner = ClaimHeld, rep.Field(1)
		if res.Token, err = rep.Int(2); err == nil {
			res.ExpiresAtMs, err = rep.Int(3)
		}
	default:
		err = fmt.Errorf("%w from fabric_claim_partition: status %q", ErrMalformedReply, rep.Field(0))
	}
	if err != nil {
		return PartitionClaimResult{Partition: p, Err: err}
	}
	return res
}

// ErrNotLeaseOwner is backend.ErrNotLeaseOwner: ReleasePartitions
// returns it for a lease the caller no longer holds under the given token.
var ErrNotLeaseOwner = backend.ErrNotLeaseOwner

// ReleasePartitions frees the leases hostID holds, pipelined; the error
// of each is nil, ErrNotLeaseOwner (wrapped, naming the holder) or the
// call's failure.
func (c *Client) ReleasePartitions(ctx context.Context, hostID string, leases []PartitionClaim) []error {
	const fn = "fabric_release_partition"
	calls := make([]Call, len(leases))
	for i, l := range leases {
		calls[i] = Call{Function: fn, Keys: []string{PartitionLeaseKey(l.Partition)}, Args: []string{hostID, strconv.FormatInt(l.Token, 10)}}
	}
	out := make([]error, len(leases))
	for i, r := range c.FCallBatch(ctx, calls) {
		switch {
		case r.Err != nil:
			out[i] = r.Err
		case r.Reply.Field(0) == "not_owner":
			out[i] = fmt.Errorf("%w: %s is held by %q under token %s", ErrNotLeaseOwner, leases[i].Partition, r.Reply.Field(1), r.Reply.Field(2))
		}
	}
	return out
}

// HostHeartbeat records hostID as live for ttl and returns the server's
// clock and the live members (hostID included), sorted by id.
func (c *Client) HostHeartbeat(ctx context.Context, hostID string, ttl time.Duration) (int64, []HostMember, error) {
	const fn = "fabric_host_heartbeat"
	rep, err := c.FCall(ctx, fn, []string{HostsKey}, []string{hostID, strconv.FormatInt(max(1, ttl.Milliseconds()), 10)})
	if err != nil {
		return 0, nil, err
	}
	now, err := rep.Int(0)
	if err != nil || len(rep.Fields)%2 != 1 {
		return 0, nil, fmt.Errorf("%w from %s: %v", ErrMalformedReply, fn, rep.Fields)
	}
	members := make([]HostMember, 0, len(rep.Fields)/2)
	for i := 1; i < len(rep.Fields); i += 2 {
		exp, err := rep.Int(i + 1)
		if err != nil {
			return 0, nil, fmt.Errorf("%w from %s: %v", ErrMalformedReply, fn, err)
		}
		members = append(members, HostMember{ID: rep.Fields[i], ExpiresAtMs: exp})
	}
	return now, members, nil
}

// HostLeave removes hostID from the members zset.
func (c *Client) HostLeave(ctx context.Context, hostID string) error {
	_, err := c.FCall(ctx, "fabric_host_leave", []string{HostsKey}, []string{hostID})
	return err
}

// PublishHostsChanged publishes "<event> <hostID>" on HostsChannel.
func (c *Client) PublishHostsChanged(ctx context.Context, event, hostID string) error {
	if err := c.c.Do(ctx, c.c.B().Publish().Channel(HostsChannel).Message(event+" "+hostID).Build()).Error(); err != nil {
		return fmt.Errorf("valkey: PUBLISH %s: %w", HostsChannel, err)
	}
	return nil
}

// ReadPartitionLeases reads every partition lease of every family (the
// client's partition counts) and the live members, in one pipelined round
// trip. An expired lease is reported with Owner "".
func (c *Client) ReadPartitionLeases(ctx context.Context) (PartitionLeaseTable, error) {
	var tbl PartitionLeaseTable
	cmds := vk.Commands{c.c.B().Time().Build(), c.c.B().Zrange().Key(HostsKey).Min("0").Max("-1").Withscores().Build()}
	var parts []model.Partition
	for _, fam := range []model.Family{model.FamilyFlow, model.FamilyBudget, model.FamilyQuota} {
		for i := range int(c.parts.Count(fam)) {
			p := model.Partition{Family: fam, Index: uint16(i)}
			parts = append(parts, p)
			cmds = append(cmds, c.c.B().Hmget().Key(PartitionLeaseKey(p)).Field("owner", "token", "expires_at").Build())
		}
	}
	res := c.c.DoMulti(ctx, cmds...)
	tm, err := res[0].AsIntSlice()
	if err != nil || len(tm) != 2 {
		return tbl, fmt.Errorf("valkey: TIME: %w", err)
	}
	tbl.NowMs = tm[0]*1000 + tm[1]/1000
	zs, err := res[1].AsZScores()
	if err != nil {
		return tbl, fmt.Errorf("valkey: ZRANGE %s: %w", HostsKey, err)
	}
	for _, z := range zs {
		if int64(z.Score) > tbl.NowMs {
			tbl.Members = append(tbl.Members, HostMember{ID: z.Member, ExpiresAtMs: int64(z.Score)})
		}
	}
	tbl.Leases = make([]PartitionLease, len(parts))
	for i, p := range parts {
		vals, err := res[i+2].ToArray()
		if err != nil || len(vals) != 3 {
			return tbl, fmt.Errorf("valkey: HMGET %s: %w", PartitionLeaseKey(p), err)
		}
		l := PartitionLease{Partition: p}
		owner := messageString(vals[0])
		l.Token, _ = strconv.ParseInt(messageString(vals[1]), 10, 64)
		exp, _ := strconv.ParseInt(messageString(vals[2]), 10, 64)
		if owner != "" && exp > tbl.NowMs {
			l.Owner, l.ExpiresAtMs = owner, exp
		}
		tbl.Leases[i] = l
	}
	return tbl, nil
}
