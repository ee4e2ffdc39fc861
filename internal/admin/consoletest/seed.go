// Package consoletest seeds a Valkey deployment with executions, a flow
// and a worker in the states the operator console shows, for the tests of
// internal/admin and cmd/fabric.
package consoletest

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// Seeded is a deployment with executions in every interesting state, made
// by a real SDK worker: what the console tests list, show and act on.
type Seeded struct {
	// VC is the deployment's client.
	VC *valkey.Client
	// Completed, Failed, Suspended, Active, Eligible and Delayed are
	// executions of lane LaneA in those states.
	Completed, Failed, Suspended, Active, Eligible, Delayed model.ExecutionID
	// Completed2 completed right after Completed (both of LaneA).
	Completed2 model.ExecutionID
	// Flow is a flow on LaneB: Root completed, Left and Right after
	// Root; Left is active (the worker's lease), Right waiting.
	Flow              model.UUID
	Root, Left, Right model.ExecutionID
	// Worker is the registered worker instance holding Active's lease.
	Worker string
}

// Lanes of a seeded deployment.
const (
	LaneA = "console-a"
	LaneB = "console-b"
	// seedSecret is the waitpoint HMAC secret (hex) of seeded deployments.
	seedSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
)

// Seed bootstraps vc's deployment and fills it (see Seeded); the worker
// closes when the test ends.
func Seed(t *testing.T, vc *valkey.Client) *Seeded {
	t.Helper()
	ctx := valkeytest.Context(t, time.Minute)
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{LaneA, LaneB}, WaitpointHMACSecret: seedSecret}); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "console-worker", InstanceID: "console-worker-1",
		Lanes: []string{LaneA, LaneB}, Capabilities: []string{"cpu"}, ResolveDependencies: true,
		DisableNotifications: true, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	s := &Seeded{VC: vc, Worker: w.InstanceID()}
	create := func(spec sdk.ExecutionSpec) model.ExecutionID {
		t.Helper()
		id, err := c.CreateExecution(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	claim := func(want model.ExecutionID) *sdk.Lease {
		t.Helper()
		var l *sdk.Lease
		valkeytest.Eventually(t, 10*time.Second, "claim "+string(want), func() bool {
			var err error
			l, err = w.ClaimNext(ctx)
			if err != nil {
				t.Fatalf("ClaimNext: %v", err)
			}
			return l != nil
		})
		if got := l.ID; got != want {
			t.Fatalf("claimed %s, want %s", got, want)
		}
		return l
	}

	s.Completed = create(sdk.ExecutionSpec{Lane: LaneA, Kind: "resize", Payload: []byte(`{"image":"cat.png"}`)})
	if err := claim(s.Completed).Complete(ctx, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	s.Completed2 = create(sdk.ExecutionSpec{Lane: LaneA, Kind: "resize"})
	if err := claim(s.Completed2).Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s.Failed = create(sdk.ExecutionSpec{Lane: LaneA, Kind: "resize", Payload: []byte(`{"image":"broken.png"}`)})
	if _, err := claim(s.Failed).Fail(ctx, "decoder exploded: bad header", "handler", false); err != nil {
		t.Fatal(err)
	}
	s.Suspended = create(sdk.ExecutionSpec{Lane: LaneA, Kind: "approve", Payload: []byte(`{"doc":7}`)})
	if _, err := claim(s.Suspended).Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f, err := c.CreateFlow(ctx, "pipeline")
	if err != nil {
		t.Fatal(err)
	}
	s.Flow = f.ID
	if s.Root, err = f.Add(ctx, sdk.ExecutionSpec{Lane: LaneB, Kind: "extract"}); err != nil {
		t.Fatal(err)
	}
	if s.Left, err = f.Add(ctx, sdk.ExecutionSpec{Lane: LaneB, Kind: "transform"}, s.Root); err != nil {
		t.Fatal(err)
	}
	if s.Right, err = f.Add(ctx, sdk.ExecutionSpec{Lane: LaneB, Kind: "load"}, s.Root); err != nil {
		t.Fatal(err)
	}
	if err := claim(s.Root).Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// One of the two children runs and holds its lease (the worker's one
	// lease): whichever the worker claims is Left, the other Right.
	var l *sdk.Lease
	valkeytest.Eventually(t, 10*time.Second, "claim a child", func() bool {
		var err error
		if l, err = w.ClaimNext(ctx); err != nil {
			t.Fatalf("ClaimNext: %v", err)
		}
		return l != nil
	})
	switch l.ID {
	case s.Left:
	case s.Right:
		s.Left, s.Right = s.Right, s.Left
	default:
		t.Fatalf("claimed %s, want a child of the flow", l.ID)
	}
	s.Active = s.Left
	s.Eligible = create(sdk.ExecutionSpec{Lane: LaneA, Kind: "resize", Priority: 5})
	s.Delayed = create(sdk.ExecutionSpec{Lane: LaneA, Kind: "report", Delay: time.Hour})
	return s
}
