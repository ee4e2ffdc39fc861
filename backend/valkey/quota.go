package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// Admission statuses of CheckAdmission (package backend's).
const (
	AdmissionAdmitted            = backend.AdmissionAdmitted
	AdmissionAlreadyAdmitted     = backend.AdmissionAlreadyAdmitted
	AdmissionRateExceeded        = backend.AdmissionRateExceeded
	AdmissionConcurrencyExceeded = backend.AdmissionConcurrencyExceeded
)

// QuotaWindowDefault is the window dimension FlowFabric's scheduler admits
// into (the unblock scanner and the reconciler read "requests_per_window").
const QuotaWindowDefault = fcall.QuotaWindowDefault

func (c *Client) quotaKeys(id model.UUID) model.QuotaKeys {
	return model.QuotaKeysFor(c.parts.QuotaPartition(id), id)
}

// CreateQuotaPolicyParams are the inputs of CreateQuotaPolicy (package
// backend's).
type CreateQuotaPolicyParams = backend.CreateQuotaPolicyParams

// CreateQuotaPolicy calls ff_create_quota_policy
// (fcall.CreateQuotaPolicyParams) on the quota's partition. It reports
// whether the policy already existed (ALREADY_SATISFIED).
func (c *Client) CreateQuotaPolicy(ctx context.Context, p *CreateQuotaPolicyParams) (existed bool, err error) {
	call := (&fcall.CreateQuotaPolicyParams{Partition: c.parts.QuotaPartition(p.QuotaID), QuotaID: p.QuotaID,
		WindowSeconds: p.WindowSeconds, MaxRequestsPerWindow: p.MaxRequestsPerWindow, MaxConcurrent: p.MaxConcurrent,
		NowMs: p.NowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return false, fmt.Errorf("create quota policy %s: %w", p.QuotaID, err)
	}
	return fcall.DecodeCreateQuotaPolicy(rep), nil
}

// CheckAdmissionParams are the inputs of CheckAdmission; it sets
// Partition from QuotaID.
type CheckAdmissionParams = fcall.CheckAdmissionParams

// AdmissionResult is CheckAdmission's reply (package backend's).
type AdmissionResult = backend.AdmissionResult

// CheckAdmission calls ff_check_admission_and_record, whose success reply
// is a bare status array rather than the {1, status} convention.
//
//	KEYS[1] window:<dimension>  KEYS[2] concurrency  KEYS[3] def (unused)
//	KEYS[4] admitted:<eid>  KEYS[5] admitted_set
//	ARGV[1] now_ms  ARGV[2] window_seconds  ARGV[3] rate_limit  ARGV[4] concurrency_cap
//	ARGV[5] execution_id  ARGV[6] jitter_ms
func (c *Client) CheckAdmission(ctx context.Context, p *CheckAdmissionParams) (*AdmissionResult, error) {
	q := *p
	q.Partition = c.parts.QuotaPartition(p.QuotaID)
	call := q.Call()
	fn := call.Function
	msg, err := c.FCallRaw(ctx, fn, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("check admission %s on quota %s: %w", p.ExecutionID, p.QuotaID, err)
	}
	arr, err := msg.ToArray()
	if err != nil || len(arr) == 0 {
		return nil, fmt.Errorf("check admission: %w from %s", ErrMalformedReply, fn)
	}
	if n, ierr := arr[0].AsInt64(); ierr == nil {
		if n == 1 {
			return nil, fmt.Errorf("check admission: %w from %s: unexpected {1, ...}", ErrMalformedReply, fn)
		}
		_, err := parseReply(fn, msg)
		return nil, fmt.Errorf("check admission %s on quota %s: %w", p.ExecutionID, p.QuotaID, err)
	}
	res := &AdmissionResult{Status: messageString(arr[0])}
	if res.Status == AdmissionRateExceeded && len(arr) > 1 {
		rep := &Reply{Fields: []string{messageString(arr[1])}}
		res.RetryAfterMs, err = rep.Int(0)
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// ReleaseAdmission calls ff_release_admission: it drops the admission guard
// and decrements the concurrency counter (floored at 0).
//
//	KEYS[1] admitted:<eid>  KEYS[2] admitted_set  KEYS[3] concurrency
//	ARGV[1] execution_id
func (c *Client) ReleaseAdmission(ctx context.Context, quota model.UUID, eid model.ExecutionID) error {
	call := fcall.ReleaseAdmissionCall(c.quotaKeys(quota), eid)
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("release admission %s on quota %s: %w", eid, quota, err)
	}
	return nil
}
