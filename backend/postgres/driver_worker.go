package postgres

import (
	"context"

	"github.com/fabric-host/fabric/backend"
)

// RegisterWorker implements backend.WorkerRegistryDriver
// (ff_worker_registry upsert and a 'registered' event).
func (d *Driver) RegisterWorker(ctx context.Context, p *backend.RegisterWorkerParams) (string, error) {
	s, err := d.c.RegisterWorker(ctx, p)
	return s, mapErr(err, false)
}

// HeartbeatWorker implements backend.WorkerRegistryDriver.
func (d *Driver) HeartbeatWorker(ctx context.Context, p *backend.HeartbeatWorkerParams) (*backend.HeartbeatResult, error) {
	r, err := d.c.HeartbeatWorker(ctx, p.Namespace, p.InstanceID, p.NowMs)
	return r, mapErr(err, false)
}

// MarkWorkerDead implements backend.WorkerRegistryDriver: the row is
// deleted and a 'marked_dead' event with the reason appended.
func (d *Driver) MarkWorkerDead(ctx context.Context, p *backend.MarkWorkerDeadParams) (bool, error) {
	found, err := d.c.MarkWorkerDead(ctx, p.Namespace, p.InstanceID, p.Reason, p.NowMs)
	return found, mapErr(err, false)
}
