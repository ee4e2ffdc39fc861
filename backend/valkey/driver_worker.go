package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// RegisterWorker implements backend.WorkerRegistryDriver
// (ff_register_worker: alive key, caps hash, workers index). With
// RefuseLive an existing alive key is checked first, so a duplicate does
// not overwrite the live instance's registration, and a register that
// found one anyway (a race) answers backend.WorkerAlive too.
func (d *Driver) RegisterWorker(ctx context.Context, p *backend.RegisterWorkerParams) (string, error) {
	if p.Namespace == "" || p.InstanceID == "" || p.WorkerID == "" || p.TTLMs <= 0 {
		return "", fmt.Errorf("%w: register worker: namespace, instance id, worker id and a positive TTL are required", backend.ErrInvalidInput)
	}
	if p.RefuseLive {
		raw := d.c.Raw()
		n, err := raw.Do(ctx, raw.B().Exists().Key(model.WorkerAliveKey(p.Namespace, p.InstanceID)).Build()).AsInt64()
		if err != nil {
			return "", fmt.Errorf("register worker %s: check alive key: %w", p.InstanceID, err)
		}
		if n > 0 {
			return backend.WorkerAlive, nil
		}
	}
	status, err := d.c.RegisterWorker(ctx, p)
	if err != nil {
		return "", mapErr(fmt.Errorf("register worker %s: %w", p.InstanceID, err), false)
	}
	if p.RefuseLive && status != backend.WorkerRegistered {
		return backend.WorkerAlive, nil
	}
	return status, nil
}

// HeartbeatWorker implements backend.WorkerRegistryDriver
// (ff_heartbeat_worker).
func (d *Driver) HeartbeatWorker(ctx context.Context, p *backend.HeartbeatWorkerParams) (*backend.HeartbeatResult, error) {
	r, err := d.c.HeartbeatWorker(ctx, p.Namespace, p.InstanceID, p.NowMs)
	if err != nil {
		return nil, mapErr(fmt.Errorf("heartbeat worker %s: %w", p.InstanceID, err), false)
	}
	return &backend.HeartbeatResult{Registered: r.Registered, NextExpiryMs: r.NextExpiryMs}, nil
}

// MarkWorkerDead implements backend.WorkerRegistryDriver: the alive key
// is deleted (the caps hash and the index entry lapse or are swept as
// after a crash). Valkey keeps no registry history, so Reason is not
// recorded.
func (d *Driver) MarkWorkerDead(ctx context.Context, p *backend.MarkWorkerDeadParams) (bool, error) {
	raw := d.c.Raw()
	n, err := raw.Do(ctx, raw.B().Del().Key(model.WorkerAliveKey(p.Namespace, p.InstanceID)).Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("mark worker dead %s: delete alive key: %w", p.InstanceID, err)
	}
	return n > 0, nil
}
