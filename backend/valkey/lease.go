package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// RenewLeaseParams are the inputs of ff_renew_lease.
type RenewLeaseParams = fcall.RenewLeaseParams

// RenewLease extends the caller's lease to now+ttl (renewal deadline
// now+floor(ttl*2/3)), refreshes the lease_expiry score and sets
// lease_current's PEXPIREAT to expires+grace. An expired lease is marked
// expired and lease_expired is returned.
//
//	KEYS[1] exec_core  KEYS[2] lease_current  KEYS[3] lease_history
//	KEYS[4] lease_expiry
//	ARGV[1] execution_id  ARGV[2] attempt_index  ARGV[3] attempt_id
//	ARGV[4] lease_id  ARGV[5] lease_epoch  ARGV[6] lease_ttl_ms
//	ARGV[7] lease_history_grace_ms
//
// Reply: ok("<new_expires_at>").
func (c *Client) RenewLease(ctx context.Context, p *RenewLeaseParams) (int64, error) {
	const fn = "ff_renew_lease"
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, schedWrap(fn, err)
	}
	exp, err := fcall.DecodeRenewLease(rep)
	if err != nil {
		return 0, schedWrap(fn, err)
	}
	return exp, nil
}

// LeaseCheckResult is the reply of ff_mark_lease_expired_if_due and the
// idempotent replies of ff_revoke_lease.
type LeaseCheckResult = fcall.LeaseCheckResult

// MarkLeaseExpiredIfDueParams are the inputs of ff_mark_lease_expired_if_due.
type MarkLeaseExpiredIfDueParams = fcall.MarkLeaseExpiredIfDueParams

// MarkLeaseExpiredIfDue is the lease-expiry scanner's re-check: a lease
// that is really past its expiry is marked expired (the execution stays in
// lease_expiry for reclaim); stale index members are removed.
//
//	KEYS[1] exec_core  KEYS[2] lease_current (unused)  KEYS[3] lease_expiry
//	KEYS[4] lease_history
//	ARGV[1] execution_id
//
// Reply: ok("marked_expired") or {1, "ALREADY_SATISFIED", reason}.
func (c *Client) MarkLeaseExpiredIfDue(ctx context.Context, p *MarkLeaseExpiredIfDueParams) (*LeaseCheckResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(call.Function, err)
	}
	return fcall.DecodeLeaseCheck(rep), nil
}

// RevokeLeaseParams are the inputs of ff_revoke_lease; RevokeLease fills
// in the pre-read WorkerInstanceID.
type RevokeLeaseParams = fcall.RevokeLeaseParams

// RevokeLeaseResult is the reply of ff_revoke_lease.
type RevokeLeaseResult = fcall.RevokeLeaseResult

// RevokeLease revokes the current lease (operator action; not terminal):
// ownership lease_revoked, attempt interrupted, lease_current deleted,
// removed from lease_expiry and the holder's worker set, a revoked event
// logged. It pre-reads current_worker_instance_id to build KEYS[5].
//
//	KEYS[1] exec_core  KEYS[2] lease_current  KEYS[3] lease_history
//	KEYS[4] lease_expiry  KEYS[5] worker_leases(holder wiid)
//	ARGV[1] execution_id  ARGV[2] expected_lease_id ("" = any)
//	ARGV[3] revoke_reason
//
// Reply: ok("revoked", lease_id, epoch) or {1, "ALREADY_SATISFIED",
// "already_revoked"|"already_expired"}.
func (c *Client) RevokeLease(ctx context.Context, p *RevokeLeaseParams) (*RevokeLeaseResult, error) {
	const fn = "ff_revoke_lease"
	wiid, err := c.schedHGet(ctx, model.KeysFor(p.ExecutionID).Core(), "current_worker_instance_id")
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	q := *p
	q.WorkerInstanceID = wiid
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	res, ok := fcall.DecodeRevokeLease(rep)
	if !ok {
		return nil, schedWrap(fn, fmt.Errorf("%w: status %q", ErrMalformedReply, rep.Status))
	}
	return res, nil
}
