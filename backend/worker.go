package backend

import (
	"context"

	"github.com/fabric-host/fabric/model/fcall"
)

// Worker registration statuses (RegisterWorker's reply).
const (
	// WorkerRegistered: the instance had no live registration.
	WorkerRegistered = "registered"
	// WorkerRefreshed: a live registration was refreshed.
	WorkerRefreshed = "refreshed"
	// WorkerAlive: RefuseLive found a live registration and left it
	// alone (another process holds the instance id).
	WorkerAlive = "alive"
)

// WorkerRegistryDriver is the worker registry: a worker instance
// registers with a liveness TTL, heartbeats within it and is removed on a
// graceful stop. Both drivers implement it; backendtest runs each
// operation on both.
type WorkerRegistryDriver interface {
	// RegisterWorker registers or refreshes an instance and returns
	// WorkerRegistered, WorkerRefreshed or, with RefuseLive, WorkerAlive.
	RegisterWorker(ctx context.Context, p *RegisterWorkerParams) (string, error)
	// HeartbeatWorker refreshes a live registration; one that lapsed (or
	// never was) is not revived and reports Registered false: register
	// again.
	HeartbeatWorker(ctx context.Context, p *HeartbeatWorkerParams) (*HeartbeatResult, error)
	// MarkWorkerDead removes a registration so the instance id can be
	// reused at once, and reports whether one existed.
	MarkWorkerDead(ctx context.Context, p *MarkWorkerDeadParams) (bool, error)
}

// RegisterWorkerParams are the inputs of WorkerRegistryDriver.RegisterWorker:
// namespace, instance and worker ids, lanes and capabilities (stored
// sorted), the liveness TTL (the registration lapses TTLMs after the last
// heartbeat), the caller's clock, and RefuseLive, which leaves a live
// registration alone and answers WorkerAlive. One type with
// ff_register_worker's parameters.
type RegisterWorkerParams = fcall.RegisterWorkerParams

// HeartbeatWorkerParams are the inputs of WorkerRegistryDriver.HeartbeatWorker.
type HeartbeatWorkerParams struct {
	Namespace  string
	InstanceID string
	NowMs      int64
}

// HeartbeatResult is the outcome of WorkerRegistryDriver.HeartbeatWorker.
type HeartbeatResult struct {
	// Registered is false when the instance has no live registration: it
	// must register again.
	Registered bool
	// NextExpiryMs is when the refreshed registration lapses.
	NextExpiryMs int64
}

// MarkWorkerDeadParams are the inputs of WorkerRegistryDriver.MarkWorkerDead.
type MarkWorkerDeadParams struct {
	Namespace  string
	InstanceID string
	// Reason is recorded where the backend keeps a registry history
	// (Postgres); at most 256 bytes, no control characters.
	Reason string
	NowMs  int64
}
