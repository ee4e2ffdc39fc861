package backendtest

import (
	"context"
	"errors"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// workerOperations are the backend.WorkerRegistryDriver and
// DeploymentDriver operations the suite exercises (appended to
// Operations; BindPartitions does no I/O and is checked with
// ReadDeployment).
var workerOperations = []string{"RegisterWorker", "HeartbeatWorker", "MarkWorkerDead", "ReadDeployment"}

func init() { Operations = append(Operations, workerOperations...) }

// runWorkers registers the WorkerRegistryDriver subtests.
func runWorkers(sub func(name string, fn func(e *env))) {
	sub("RegisterWorker+HeartbeatWorker+MarkWorkerDead", testWorkerRegistry)
	sub("RegisterWorker/InvalidInput", testRegisterWorkerInvalid)
	sub("ReadDeployment+BindPartitions", testReadDeployment)
}

// testReadDeployment: a migrated backend reads a usable partition config,
// and the driver bound to it routes with it.
func testReadDeployment(e *env) {
	dep, err := e.d.ReadDeployment(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if dep.Partitions.Flow == 0 || dep.Partitions.Budget == 0 || dep.Partitions.Quota == 0 {
		e.t.Fatalf("deployment partitions %+v", dep.Partitions)
	}
	b := e.d.BindPartitions(dep.Partitions)
	if b.Partitions() != dep.Partitions || b.Name() != e.d.Name() {
		e.t.Fatalf("bound driver %s routes with %+v, want %s with %+v", b.Name(), b.Partitions(), e.d.Name(), dep.Partitions)
	}
	if _, err := b.ExecutionState(e.ctx, b.Partitions().NewSoloExecutionID(e.lane)); !errors.Is(err, backend.ErrNotFound) {
		e.t.Fatalf("state through the bound driver: %v, want ErrNotFound", err)
	}
}

func (e *env) workerParams(instance string) *backend.RegisterWorkerParams {
	return &backend.RegisterWorkerParams{Namespace: "bt", InstanceID: instance, WorkerID: "bt-worker",
		Lanes: []string{e.lane}, Capabilities: []string{"gpu", "arm"}, TTLMs: ttl, NowMs: time.Now().UnixMilli()}
}

func (e *env) register(p *backend.RegisterWorkerParams, want string) {
	e.t.Helper()
	status, err := e.d.RegisterWorker(e.ctx, p)
	if err != nil {
		e.t.Fatalf("register %s: %v", p.InstanceID, err)
	}
	if status != want {
		e.t.Fatalf("register %s (refuse live %v): %q, want %q", p.InstanceID, p.RefuseLive, status, want)
	}
}

func (e *env) heartbeat(instance string) *backend.HeartbeatResult {
	e.t.Helper()
	r, err := e.d.HeartbeatWorker(e.ctx, &backend.HeartbeatWorkerParams{Namespace: "bt", InstanceID: instance,
		NowMs: time.Now().UnixMilli()})
	if err != nil {
		e.t.Fatalf("heartbeat %s: %v", instance, err)
	}
	return r
}

func (e *env) markDead(instance string) bool {
	e.t.Helper()
	found, err := e.d.MarkWorkerDead(e.ctx, &backend.MarkWorkerDeadParams{Namespace: "bt", InstanceID: instance,
		Reason: "bt closed", NowMs: time.Now().UnixMilli()})
	if err != nil {
		e.t.Fatalf("mark %s dead: %v", instance, err)
	}
	return found
}

// testWorkerRegistry: an instance registers, refreshes, is refused to a
// second process (RefuseLive), heartbeats within its TTL, and once marked
// dead heartbeats unregistered and can register again at once.
func testWorkerRegistry(e *env) {
	instance := "bt-" + model.NewUUID().String()
	if r := e.heartbeat(instance); r.Registered {
		e.t.Fatalf("heartbeat of an instance never registered: %+v", r)
	}
	if e.markDead(instance) {
		e.t.Fatal("marked dead an instance never registered")
	}
	e.register(e.workerParams(instance), backend.WorkerRegistered)
	e.register(e.workerParams(instance), backend.WorkerRefreshed)
	p := e.workerParams(instance)
	p.RefuseLive = true
	e.register(p, backend.WorkerAlive)
	before := time.Now().UnixMilli()
	r := e.heartbeat(instance)
	if !r.Registered || r.NextExpiryMs < before+ttl || r.NextExpiryMs > time.Now().UnixMilli()+ttl {
		e.t.Fatalf("heartbeat of a live instance: %+v, want registered until about now+%d", r, ttl)
	}
	if !e.markDead(instance) {
		e.t.Fatal("mark dead did not find the live registration")
	}
	if r := e.heartbeat(instance); r.Registered {
		e.t.Fatalf("heartbeat after mark dead: %+v", r)
	}
	if e.markDead(instance) {
		e.t.Fatal("marked dead twice")
	}
	e.register(p, backend.WorkerRegistered)
	if !e.heartbeat(instance).Registered {
		e.t.Fatal("heartbeat after registering again: not registered")
	}
	e.markDead(instance)
}

// testRegisterWorkerInvalid: a registration without an instance id,
// worker id or positive TTL is refused and registers nothing.
func testRegisterWorkerInvalid(e *env) {
	instance := "bt-" + model.NewUUID().String()
	for name, edit := range map[string]func(p *backend.RegisterWorkerParams){
		"no instance id": func(p *backend.RegisterWorkerParams) { p.InstanceID = "" },
		"no worker id":   func(p *backend.RegisterWorkerParams) { p.WorkerID = "" },
		"no TTL":         func(p *backend.RegisterWorkerParams) { p.TTLMs = 0 },
	} {
		p := e.workerParams(instance)
		edit(p)
		_, err := e.d.RegisterWorker(e.ctx, p)
		wantErr(e.t, "register with "+name, err, backend.ErrInvalidInput)
	}
	if r := e.heartbeat(instance); r.Registered {
		e.t.Fatalf("a refused registration registered: %+v", r)
	}
}

// workerUnmigrated are RunUnmigrated's cases of the WorkerRegistryDriver
// operations.
func workerUnmigrated(ctx context.Context, d backend.Driver) map[string]func() error {
	return map[string]func() error{
		"RegisterWorker": func() error {
			_, err := d.RegisterWorker(ctx, &backend.RegisterWorkerParams{Namespace: "bt", InstanceID: "i", WorkerID: "w", TTLMs: ttl})
			return err
		},
		"HeartbeatWorker": func() error {
			_, err := d.HeartbeatWorker(ctx, &backend.HeartbeatWorkerParams{Namespace: "bt", InstanceID: "i"})
			return err
		},
		"ReadDeployment": func() error {
			_, err := d.ReadDeployment(ctx)
			return err
		},
		"MarkWorkerDead": func() error {
			_, err := d.MarkWorkerDead(ctx, &backend.MarkWorkerDeadParams{Namespace: "bt", InstanceID: "i"})
			return err
		},
	}
}
