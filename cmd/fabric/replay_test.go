package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestRecordAndReplay records a partition holding a due delayed execution
// with `fabric record` and replays the delayed promoter on it twice with
// `fabric plugins replay`: the same bytes, one promotion, and the recorded
// server unchanged.
func TestRecordAndReplay(t *testing.T) {
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 5*time.Minute)
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eid := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 9}, model.NewUUID())
	if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: "rr", LaneID: "default", ExecutionKind: "k", DelayUntil: now + 50}); err != nil {
		t.Fatal(err)
	}
	valkeytest.Eventually(t, 10*time.Second, "the execution due", func() bool {
		ms, err := c.ServerTime(ctx)
		return err == nil && ms > now+100
	})
	wasm := "../../bin/plugins/delayed_promoter.wasm"
	cs := filepath.Join(t.TempDir(), "dp.case.json")

	if code, _, errOut := runCmd(t, "record", "--valkey-url", srv.URL(), "--plugin", wasm, "--partition", "flow:9"); code != 2 || !strings.Contains(errOut, "required") {
		t.Fatalf("record without --out: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "record", "--valkey-url", srv.URL(), "--plugin", wasm, "--partition", "budget:1", "--out", cs); code != 2 || !strings.Contains(errOut, "sweeps flow partitions") {
		t.Fatalf("record of a budget partition for a flow plugin: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "record", "--valkey-url", srv.URL(), "--plugin", wasm, "--partition", "flow:256", "--out", cs); code != 2 || !strings.Contains(errOut, "out of range") {
		t.Fatalf("record of partition 256: code %d, stderr %q", code, errOut)
	}
	code, out, errOut := runCmd(t, "record", "--valkey-url", srv.URL(), "--plugin", wasm, "--partition", "flow:9", "--out", cs)
	if code != 0 || !strings.Contains(out, "recorded {fp:9} for delayed_promoter") {
		t.Fatalf("record: code %d\n%s\n%s", code, out, errOut)
	}
	var outs []string
	for i := 0; i < 2; i++ {
		code, out, errOut := runCmd(t, "plugins", "replay", wasm, cs)
		if code != 0 {
			t.Fatalf("replay %d: code %d\n%s\n%s", i+1, code, out, errOut)
		}
		outs = append(outs, out)
	}
	if outs[0] != outs[1] {
		t.Fatalf("two replays differ:\n%s\n---\n%s", outs[0], outs[1])
	}
	if !strings.Contains(outs[0], "acted=1") || !strings.Contains(outs[0], "fcall ff_promote_delayed") || !strings.Contains(outs[0], `"eligibility_state"="eligible_now"`) {
		t.Fatalf("replay does not show the promotion:\n%s", outs[0])
	}
	st, err := c.ExecutionCore(ctx, eid)
	if err != nil || st["eligibility_state"] == "eligible_now" {
		t.Fatalf("the recorded server changed: %v %v", st["eligibility_state"], err)
	}
	if code, _, errOut := runCmd(t, "plugins", "replay", wasm, wasm); code != 1 || !strings.Contains(errOut, "decode case") {
		t.Fatalf("replay of a non-case: code %d, stderr %q", code, errOut)
	}
}
