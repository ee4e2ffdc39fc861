package valkey_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// famFlow creates a flow and returns its id and keys.
func famFlow(t *testing.T, c *valkey.Client) (model.UUID, model.FlowKeys) {
	t.Helper()
	id := model.NewUUID()
	ctx := valkeytest.Context(t, 10*time.Second)
	if existed, err := c.CreateFlow(ctx, id, "dag", "ns", famNow); err != nil || existed {
		t.Fatalf("CreateFlow = %v, %v", existed, err)
	}
	return id, model.FlowKeysFor(c.Partitions().FlowPartition(id), id)
}

// famMember mints a runnable execution on the flow's partition (seeded
// like ff_create_execution leaves it) and adds it to the flow.
func famMember(t *testing.T, c *valkey.Client, flow model.UUID, lane string, createdAt int64) model.ExecutionID {
	t.Helper()
	eid := c.Partitions().NewFlowExecutionID(flow)
	famSeedExec(t, c, eid, lane, createdAt)
	ctx := valkeytest.Context(t, 10*time.Second)
	if _, _, err := c.AddExecutionToFlow(ctx, flow, eid, famNow); err != nil {
		t.Fatal(err)
	}
	return eid
}

// famRevision reads flow_core.graph_revision.
func famRevision(t *testing.T, c *valkey.Client, flow model.UUID) int64 {
	t.Helper()
	fk := model.FlowKeysFor(c.Partitions().FlowPartition(flow), flow)
	n, err := c.Raw().Do(context.Background(), c.Raw().B().Hget().Key(fk.Core()).Field("graph_revision").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// famEdge stages and applies an edge up -> down.
func famEdge(t *testing.T, c *valkey.Client, flow model.UUID, up, down model.ExecutionID, dataRef string) model.UUID {
	t.Helper()
	ctx := valkeytest.Context(t, 10*time.Second)
	p := &valkey.EdgeParams{Flow: flow, EdgeID: model.NewUUID(), Upstream: up, Downstream: down,
		DataPassingRef: dataRef, GraphRevision: famRevision(t, c, flow), NowMs: famNow}
	rev, err := c.StageDependencyEdge(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.GraphRevision = rev
	if _, _, err := c.ApplyDependencyToChild(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p.EdgeID
}

// famFinish makes an execution terminal with outcome the way the
// terminal functions leave exec_core (the fields the DAG code reads).
func famFinish(t *testing.T, c *valkey.Client, eid model.ExecutionID, outcome string) {
	t.Helper()
	public := map[string]string{"success": "completed", "failed": "failed", "cancelled": "cancelled",
		"expired": "expired", "skipped": "skipped"}[outcome]
	famHSet(t, c, model.KeysFor(eid).Core(), "lifecycle_phase", "terminal", "ownership_state", "unowned",
		"eligibility_state", "not_applicable", "blocking_reason", "none", "terminal_outcome", outcome,
		"attempt_state", "attempt_terminal", "public_state", public, "completed_at", "1700000000000")
}

// famCompletions subscribes to ff:dag:completions and returns a function
// that waits for the message of eid.
func famCompletions(t *testing.T, c *valkey.Client) func(eid model.ExecutionID) map[string]string {
	t.Helper()
	dc, cancel := c.Raw().Dedicate()
	t.Cleanup(cancel)
	var mu sync.Mutex
	var got []string
	ready := make(chan struct{})
	var once sync.Once
	dc.SetPubSubHooks(vk.PubSubHooks{
		OnMessage: func(m vk.PubSubMessage) {
			mu.Lock()
			got = append(got, m.Message)
			mu.Unlock()
		},
		OnSubscription: func(s vk.PubSubSubscription) {
			if s.Kind == "subscribe" {
				once.Do(func() { close(ready) })
			}
		},
	})
	ctx := valkeytest.Context(t, 10*time.Second)
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(model.ChannelDAGCompletions).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("subscription not confirmed")
	}
	return func(eid model.ExecutionID) map[string]string {
		t.Helper()
		var msg map[string]string
		valkeytest.Eventually(t, 30*time.Second, "completion of "+string(eid), func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, raw := range got {
				var m map[string]string
				if json.Unmarshal([]byte(raw), &m) == nil && m["execution_id"] == string(eid) {
					msg = m
					return true
				}
			}
			return false
		})
		return msg
	}
}
