package valkey

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// Defaults FlowFabric's backend sends for the suspension family.
const (
	// SuspendDedupMaxTTLMs caps the suspend idempotency window (7 days).
	SuspendDedupMaxTTLMs = fcall.SuspendDedupMaxTTLMs
	// DefaultLeaseHistoryMaxLen is the lease_history MAXLEN the backend sends.
	DefaultLeaseHistoryMaxLen = fcall.DefaultLeaseHistoryMaxLen
	// DefaultHMACKid is the kid the boot step installs when a partition's
	// keystore is empty.
	DefaultHMACKid = "k1"
)

// suspWrap names the operation on transport errors; a *LuaError already
// names its function and keeps its code through %w.
func suspWrap(op string, err error) error {
	return fmt.Errorf("%s: %w", op, err)
}

// suspCoreFields HMGETs fields of eid's exec_core (absent fields are "").
func (c *Client) suspCoreFields(ctx context.Context, eid model.ExecutionID, fields ...string) ([]string, error) {
	vals, err := c.c.Do(ctx, c.c.B().Hmget().Key(model.KeysFor(eid).Core()).Field(fields...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("pre-read exec_core %s: %w", eid, err)
	}
	out := make([]string, len(fields))
	for i := range fields {
		if i < len(vals) {
			out[i], _ = vals[i].ToString()
		}
	}
	return out, nil
}

func suspAttemptIndex(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// WaitpointBinding names a waitpoint: its uuid and its external key.
type WaitpointBinding = fcall.WaitpointBinding

// WaitpointGrant is a bound waitpoint and the HMAC token that authenticates
// signals delivered to it.
type WaitpointGrant = fcall.WaitpointGrant

// SuspendParams are the inputs of ff_suspend_execution
// (fcall.SuspendParams); SuspendExecution pre-reads an empty Lane or
// WorkerInstanceID from exec_core.
type SuspendParams = fcall.SuspendParams

// SuspendResult is the reply of ff_suspend_execution.
type SuspendResult = fcall.SuspendResult

// SuspendExecution releases the lease and parks the execution on its
// waitpoint(s) (ff_suspend_execution), returning the waitpoint tokens.
func (c *Client) SuspendExecution(ctx context.Context, p *SuspendParams) (*SuspendResult, error) {
	q := *p
	if q.Lane == "" || q.WorkerInstanceID == "" {
		f, err := c.suspCoreFields(ctx, p.ExecutionID, "lane_id", "current_worker_instance_id")
		if err != nil {
			return nil, suspWrap("suspend execution", err)
		}
		if q.Lane == "" {
			q.Lane = f[0]
		}
		if q.WorkerInstanceID == "" {
			q.WorkerInstanceID = f[1]
		}
	}
	var now int64
	if q.IdempotencyKey != "" && q.DedupTTLMs <= 0 && q.TimeoutAt > 0 {
		t, err := c.ServerTime(ctx)
		if err != nil {
			return nil, suspWrap("suspend execution", err)
		}
		now = t
	}
	call := q.Call(now)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("suspend execution "+string(p.ExecutionID), err)
	}
	return fcall.DecodeSuspend(rep), nil
}

// ResumeParams are the inputs of ff_resume_execution; ResumeExecution
// pre-reads an empty Lane or WaitpointID.
type ResumeParams = fcall.ResumeParams

// ResumeExecution resumes a suspended execution (ff_resume_execution) and
// returns its new public state, waiting or delayed.
func (c *Client) ResumeExecution(ctx context.Context, p *ResumeParams) (string, error) {
	q := *p
	if q.Lane == "" || q.WaitpointID == "" {
		f, err := c.suspCoreFields(ctx, p.ExecutionID, "lane_id", "current_waitpoint_id")
		if err != nil {
			return "", suspWrap("resume execution", err)
		}
		if q.Lane == "" {
			q.Lane = f[0]
		}
		if q.WaitpointID == "" {
			q.WaitpointID = f[1]
		}
	}
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", suspWrap("resume execution "+string(p.ExecutionID), err)
	}
	return rep.Field(0), nil
}

// CreatePendingWaitpointParams are the inputs of ff_create_pending_waitpoint.
type CreatePendingWaitpointParams = fcall.CreatePendingWaitpointParams

// CreatePendingWaitpoint pre-creates an addressable waitpoint while the
// caller still holds the lease (ff_create_pending_waitpoint).
func (c *Client) CreatePendingWaitpoint(ctx context.Context, p *CreatePendingWaitpointParams) (*WaitpointGrant, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("create pending waitpoint "+p.WaitpointID, err)
	}
	return fcall.DecodeWaitpointGrant(rep), nil
}

// ExpireSuspensionResult is the reply of ff_expire_suspension.
type ExpireSuspensionResult = fcall.ExpireSuspensionResult

// ExpireSuspensionCall builds the FCALL of ff_expire_suspension from the
// pre-read lane, attempt index and waitpoint id (fcall.ExpireSuspensionParams).
func ExpireSuspensionCall(eid model.ExecutionID, lane string, attemptIndex int, waitpointID string) Call {
	return (&fcall.ExpireSuspensionParams{ExecutionID: eid, Lane: lane, AttemptIndex: attemptIndex,
		WaitpointID: waitpointID}).Call()
}

// ExpireSuspension applies a due suspension's timeout behavior
// (ff_expire_suspension), pre-reading lane, attempt index and waitpoint.
func (c *Client) ExpireSuspension(ctx context.Context, eid model.ExecutionID) (*ExpireSuspensionResult, error) {
	f, err := c.suspCoreFields(ctx, eid, "lane_id", "current_attempt_index", "current_waitpoint_id")
	if err != nil {
		return nil, suspWrap("expire suspension", err)
	}
	call := ExpireSuspensionCall(eid, f[0], suspAttemptIndex(f[1]), f[2])
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("expire suspension "+string(eid), err)
	}
	return fcall.DecodeExpireSuspension(rep), nil
}

// CloseWaitpointCall builds the FCALL of ff_close_waitpoint
// (fcall.CloseWaitpointParams).
func CloseWaitpointCall(eid model.ExecutionID, waitpointID, reason string) Call {
	return (&fcall.CloseWaitpointParams{ExecutionID: eid, WaitpointID: waitpointID, Reason: reason}).Call()
}

// CloseWaitpoint closes a pending or active waitpoint (ff_close_waitpoint).
// It reports alreadyClosed for a waitpoint that was closed before.
func (c *Client) CloseWaitpoint(ctx context.Context, eid model.ExecutionID, waitpointID, reason string) (alreadyClosed bool, err error) {
	call := CloseWaitpointCall(eid, waitpointID, reason)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return false, suspWrap("close waitpoint "+waitpointID, err)
	}
	return fcall.DecodeCloseWaitpoint(rep), nil
}

// RotateHMACResult is the reply of ff_rotate_waitpoint_hmac_secret.
type RotateHMACResult = fcall.RotateHMACResult

// RotateWaitpointHMACSecret installs a new signing kid on one partition
// (ff_rotate_waitpoint_hmac_secret); the previous kid keeps validating for
// graceMs.
//
//	KEYS[1] hmac_secrets  ARGV[1] new_kid  ARGV[2] new_secret_hex  ARGV[3] grace_ms
func (c *Client) RotateWaitpointHMACSecret(ctx context.Context, p model.Partition, kid, secretHex string, graceMs int64) (*RotateHMACResult, error) {
	call := fcall.RotateHMACCall(p, kid, secretHex, graceMs)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("rotate waitpoint hmac secret on "+p.Tag(), err)
	}
	return fcall.DecodeRotateHMAC(rep), nil
}

// RotateWaitpointHMACSecretAll fans the rotation out to every flow
// partition (each holds its own keystore copy). Every partition is tried;
// the errors are joined.
func (c *Client) RotateWaitpointHMACSecretAll(ctx context.Context, kid, secretHex string, graceMs int64) error {
	return c.suspEachFlowPartition(ctx, func(p model.Partition) error {
		_, err := c.RotateWaitpointHMACSecret(ctx, p, kid, secretHex, graceMs)
		return err
	})
}

// HMACKid is a non-current kid still inside its grace window.
type HMACKid = fcall.HMACKid

// HMACKids is the reply of ff_list_waitpoint_hmac_kids.
type HMACKids = fcall.HMACKids

// ListWaitpointHMACKids lists a partition's current kid and the older kids
// that still validate tokens (ff_list_waitpoint_hmac_kids).
//
//	KEYS[1] hmac_secrets
func (c *Client) ListWaitpointHMACKids(ctx context.Context, p model.Partition) (*HMACKids, error) {
	call := fcall.ListHMACKidsCall(p)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("list waitpoint hmac kids on "+p.Tag(), err)
	}
	return fcall.DecodeHMACKids(rep), nil
}

// InstallWaitpointHMACSecret is the boot step that seeds every flow
// partition's keystore: where current_kid is absent it writes
// current_kid=k1 and secret:k1=secretHex; where current_kid is present but
// its secret is missing (a torn write) it writes the secret; a stored
// secret that differs from secretHex is kept (and logged). Partitions are
// handled 16 at a time.
func (c *Client) InstallWaitpointHMACSecret(ctx context.Context, secretHex string) error {
	if secretHex == "" || len(secretHex)%2 != 0 {
		return errors.New("install waitpoint hmac secret: secret must be non-empty, even-length hex")
	}
	for _, r := range secretHex {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return errors.New("install waitpoint hmac secret: secret must be hex")
		}
	}
	return c.suspEachFlowPartition(ctx, func(p model.Partition) error {
		key := model.KeysOn(p).WaitpointHMACSecrets()
		kid, err := c.c.Do(ctx, c.c.B().Hget().Key(key).Field("current_kid").Build()).ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return fmt.Errorf("install waitpoint hmac secret on %s: %w", p.Tag(), err)
		}
		if kid == "" {
			err := c.c.Do(ctx, c.c.B().Hset().Key(key).FieldValue().
				FieldValue("current_kid", DefaultHMACKid).
				FieldValue("secret:"+DefaultHMACKid, secretHex).Build()).Error()
			if err != nil {
				return fmt.Errorf("install waitpoint hmac secret on %s: %w", p.Tag(), err)
			}
			return nil
		}
		stored, err := c.c.Do(ctx, c.c.B().Hget().Key(key).Field("secret:"+kid).Build()).ToString()
		switch {
		case err != nil && vk.IsValkeyNil(err):
			if err := c.c.Do(ctx, c.c.B().Hset().Key(key).FieldValue().
				FieldValue("secret:"+kid, secretHex).Build()).Error(); err != nil {
				return fmt.Errorf("install waitpoint hmac secret on %s: %w", p.Tag(), err)
			}
		case err != nil:
			return fmt.Errorf("install waitpoint hmac secret on %s: %w", p.Tag(), err)
		case stored != secretHex:
			c.log.Warn("waitpoint hmac secret differs from the configured one; keeping the stored secret",
				"partition", p.Tag(), "kid", kid)
		}
		return nil
	})
}

// WaitpointHMACMissing counts the flow partitions whose waitpoint HMAC
// keystore has no current key (one pipelined HGET current_kid per
// partition). Suspending an execution on such a partition fails with
// hmac_secret_not_initialized until a secret is installed.
func (c *Client) WaitpointHMACMissing(ctx context.Context) (int, error) {
	n := int(c.parts.Flow)
	cmds := make(vk.Commands, n)
	for i := range n {
		key := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: uint16(i)}).WaitpointHMACSecrets()
		cmds[i] = c.c.B().Hget().Key(key).Field("current_kid").Build()
	}
	missing := 0
	for _, r := range c.c.DoMulti(ctx, cmds...) {
		kid, err := r.ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return 0, fmt.Errorf("read waitpoint hmac keystore: %w", err)
		}
		if kid == "" {
			missing++
		}
	}
	return missing, nil
}

// suspEachFlowPartition runs fn for every flow partition, 16 at a time,
// and joins the errors.
func (c *Client) suspEachFlowPartition(ctx context.Context, fn func(model.Partition) error) error {
	n := int(c.parts.Flow)
	sem := make(chan struct{}, 16)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(model.Partition{Family: model.FamilyFlow, Index: uint16(i)})
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}
