package host_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// shadowSetup starts a host on a real server running delayed_promoter
// (every 100 ms) on lanes "default" and "slow".
func shadowSetup(t *testing.T, disabled bool) (*testBundle, *valkey.Client) {
	t.Helper()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"delayed_promoter": {Interval: 100 * time.Millisecond, Disabled: disabled},
	}})
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(b.dir, "delayed_promoter.wasm"))
	c := b.backend(t)
	if err := c.Bootstrap(context.Background(), valkey.BootstrapConfig{Lanes: []string{"default", "slow"}}); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	return b, c
}

// candidate copies a fixture to a file of its own (a candidate lives
// outside the plugin directory) and returns its path.
func candidate(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".wasm")
	copyFile(t, fixture(t, name), path)
	return path
}

// createDelayed creates an execution on partition part of lane, due at
// dueAt (server time, ms).
func createDelayed(t *testing.T, c *valkey.Client, part uint16, lane string, dueAt int64) model.ExecutionID {
	t.Helper()
	id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: part}, model.NewUUID())
	if _, err := c.CreateExecution(context.Background(), &valkey.CreateExecutionParams{
		ExecutionID: id, Namespace: "shadow", LaneID: lane, ExecutionKind: "k", DelayUntil: dueAt,
	}); err != nil {
		t.Fatalf("ff_create_execution: %v", err)
	}
	return id
}

func serverTime(t *testing.T, c *valkey.Client) int64 {
	t.Helper()
	ms, err := c.ServerTime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// waitPromoted waits until every id is eligible.
func waitPromoted(t *testing.T, c *valkey.Client, ids []model.ExecutionID) {
	t.Helper()
	for _, id := range ids {
		valkeytest.Eventually(t, 30*time.Second, string(id)+" promoted", func() bool {
			core, err := c.ExecutionCore(context.Background(), id)
			return err == nil && core["eligibility_state"] == "eligible_now"
		})
	}
}

// TestShadowIdenticalVersionAgrees: a shadow of the live version itself,
// over many sweeps while executions keep falling due on both lanes of
// every partition, meant exactly what the live version did: every
// promotion is an agreement, none a difference.
func TestShadowIdenticalVersionAgrees(t *testing.T) {
	t.Parallel()
	b, c := shadowSetup(t, false)
	name, err := b.host.LoadShadow(context.Background(), candidate(t, "delayed_promoter"))
	if err != nil || name != "delayed_promoter" {
		t.Fatalf("LoadShadow = %q, %v", name, err)
	}
	st, _ := b.host.Plugin("delayed_promoter")
	if st.Shadow == nil || st.Shadow.Version != st.Version || st.Shadow.SHA256 != st.SHA256 || st.Shadow.Solo {
		t.Fatalf("status shadow = %+v (live %s %s)", st.Shadow, st.Version, st.SHA256)
	}
	// The workload: 5 rounds of 16 executions (2 lanes × 4 partitions ×
	// 2), due 50-400 ms after their creation, over about 2 s.
	var ids []model.ExecutionID
	delayed := 0 // created delayed: on a loaded machine a due time may pass before its creation (then it is eligible at once)
	for round := 0; round < 5; round++ {
		now := serverTime(t, c)
		for i := 0; i < 16; i++ {
			lane := []string{"default", "slow"}[i%2]
			id := createDelayed(t, c, uint16(i/2%4), lane, now+50+int64(i)*22)
			ids = append(ids, id)
			if core, err := c.ExecutionCore(context.Background(), id); err == nil && core["delay_until"] != "" {
				delayed++
			}
		}
		waitCycles(t, b, "delayed_promoter", 3)
	}
	waitPromoted(t, c, ids)
	waitCycles(t, b, "delayed_promoter", 2)
	d, err := b.host.ShadowDiff("delayed_promoter")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shadow: %d calls compared (%d agreeing), %d actions agree, %d disagree, %d skipped", d.Calls, d.AgreeingCalls, d.Agree, d.Disagree, d.Skipped)
	if d.Disagree != 0 || d.OnlyLive != 0 || d.OnlyCandidate != 0 || len(d.Samples) != 0 {
		t.Fatalf("the live version's own shadow disagrees: %+v", d)
	}
	if delayed == 0 || d.Agree < int64(delayed) || d.AgreeRatio() != 1 || d.Calls < 20 || d.AgreeingCalls != d.Calls || d.Faults != 0 {
		t.Fatalf("shadow = %+v; want at least %d agreeing promotions (of %d executions created delayed, %d in all) over at least 20 compared calls, all agreeing", d, delayed, delayed, len(ids))
	}
	if st, _ := b.host.Plugin("delayed_promoter"); st.Faults != 0 {
		t.Fatalf("live faults: %+v", st)
	}
}

// TestShadowReportsTheChangedExecutions: a candidate that never reads the
// lane "slow" (promoter_skipslow) differs from the live promoter exactly
// by the slow lane's promotions, and meant the default lane's.
func TestShadowReportsTheChangedExecutions(t *testing.T) {
	t.Parallel()
	b, c := shadowSetup(t, false)
	if _, err := b.host.LoadShadow(context.Background(), candidate(t, "promoter_skipslow")); err != nil {
		t.Fatal(err)
	}
	now := serverTime(t, c)
	var slow, fast []model.ExecutionID
	for part := uint16(0); part < 4; part++ {
		fast = append(fast, createDelayed(t, c, part, "default", now+1000))
		slow = append(slow, createDelayed(t, c, part, "slow", now+1000))
	}
	waitPromoted(t, c, append(slices.Clone(fast), slow...))
	waitCycles(t, b, "delayed_promoter", 2)
	d, err := b.host.ShadowDiff("delayed_promoter")
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != "1.0.0-skipslow" || d.Agree != int64(len(fast)) || d.OnlyLive != int64(len(slow)) || d.OnlyCandidate != 0 {
		t.Fatalf("shadow = %+v; want %d agreeing (default lane) and %d only live (slow lane)", d, len(fast), len(slow))
	}
	var named []string
	for _, s := range d.Samples {
		if s.Side != "live" || s.Action.Kind != "fcall" || s.Action.Name != "ff_promote_delayed" {
			t.Fatalf("sample %+v: want a live ff_promote_delayed", s)
		}
		named = append(named, s.Action.Subject)
	}
	var want []string
	for _, id := range slow {
		want = append(want, string(id))
	}
	sort.Strings(named)
	sort.Strings(want)
	if !slices.Equal(named, want) {
		t.Fatalf("differences name %q; want the slow lane's executions %q", named, want)
	}
}

// dumpAll is every key of the server with its DUMP.
func dumpAll(t *testing.T, c *valkey.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	raw := c.Raw()
	out := map[string]string{}
	cursor := uint64(0)
	for {
		e, err := raw.Do(ctx, raw.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			if !strings.HasPrefix(k, "ff:") {
				continue // the host's own (partition leases, heartbeats)
			}
			v, err := raw.Do(ctx, raw.B().Dump().Key(k).Build()).ToString()
			if err != nil {
				t.Fatalf("DUMP %s: %v", k, err)
			}
			out[k] = v
		}
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

// TestShadowLeavesKeyspaceUnchanged: with the live version disabled the
// candidate sweeps alone; it meant to promote every due execution, and
// the keyspace (every FlowFabric key's DUMP) is the same before and
// after.
func TestShadowLeavesKeyspaceUnchanged(t *testing.T) {
	t.Parallel()
	b, c := shadowSetup(t, true)
	now := serverTime(t, c)
	var ids []model.ExecutionID
	for part := uint16(0); part < 4; part++ {
		for _, lane := range []string{"default", "slow"} {
			id := createDelayed(t, c, part, lane, now+300)
			// Nothing promotes here (the live version is disabled): one
			// not delayed was created after its due time on a loaded
			// machine, eligible at once.
			if core, err := c.ExecutionCore(context.Background(), id); err == nil && core["eligibility_state"] == "not_eligible_until_time" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		t.Fatal("no execution was created delayed")
	}
	valkeytest.Eventually(t, 10*time.Second, "all due", func() bool { return serverTime(t, c) > now+350 })
	before := dumpAll(t, c)
	if _, err := b.host.LoadShadow(context.Background(), candidate(t, "delayed_promoter")); err != nil {
		t.Fatal(err)
	}
	var d host.ShadowStatus
	valkeytest.Eventually(t, 30*time.Second, "three solo sweeps", func() bool {
		d, _ = b.host.ShadowDiff("delayed_promoter")
		return d.Calls >= 3*4
	})
	if !d.Solo || d.OnlyCandidate < int64(len(ids)) || d.DryRuns < int64(len(ids)) || d.Agree != 0 || d.Faults != 0 {
		t.Fatalf("solo shadow = %+v; want every due execution meant (%d), none sent", d, len(ids))
	}
	after := dumpAll(t, c)
	if len(before) != len(after) {
		t.Fatalf("%d keys before the shadow, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("key %s changed under a shadow", k)
		}
	}
	for _, id := range ids {
		core, err := c.ExecutionCore(context.Background(), id)
		if err != nil || core["eligibility_state"] != "not_eligible_until_time" {
			t.Fatalf("%s: %v %v; a shadow promoted it", id, core, err)
		}
	}
	if err := b.host.Unshadow(context.Background(), "delayed_promoter"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.host.ShadowDiff("delayed_promoter"); !errors.Is(err, host.ErrNoShadow) {
		t.Fatalf("ShadowDiff after Unshadow: %v", err)
	}
}

// TestPromoteAndRollback: the candidate becomes live at a partition
// boundary and the previous version comes back the same way; no sweep
// misses or doubles a partition call (the cycle records).
func TestPromoteAndRollback(t *testing.T) {
	prewarm(t, "swap_v1", "swap_v2")
	b := setup(t, setupOpts{fixtures: []string{"healthy"}, noStart: true})
	copyFile(t, fixture(t, "swap_v1"), filepath.Join(b.dir, "swapper.wasm"))
	b.start(t)
	ctx := context.Background()
	if _, err := b.host.Rollback(ctx, "swapper"); !errors.Is(err, host.ErrNoShadow) {
		t.Fatalf("Rollback with nothing promoted: %v", err)
	}
	if _, err := b.host.Promote(ctx, "swapper"); !errors.Is(err, host.ErrNoShadow) {
		t.Fatalf("Promote without a shadow: %v", err)
	}
	if _, err := b.host.LoadShadow(ctx, candidate(t, "swap_v2")); err != nil {
		t.Fatal(err)
	}
	waitCycles(t, b, "swapper", 3)
	d, err := b.host.ShadowDiff("swapper")
	if err != nil || d.Calls == 0 || d.Version != "2.0.0" {
		t.Fatalf("shadow before promotion = %+v, %v", d, err)
	}
	v, err := b.host.Promote(ctx, "swapper")
	if err != nil || v != "2.0.0" {
		t.Fatalf("Promote = %q, %v", v, err)
	}
	st, _ := b.host.Plugin("swapper")
	if st.Version != "2.0.0" || st.Shadow != nil || !strings.HasPrefix(st.Previous, "1.0.0 ") {
		t.Fatalf("after promotion: version %s, shadow %+v, previous %q", st.Version, st.Shadow, st.Previous)
	}
	waitCycles(t, b, "swapper", 3)
	v, err = b.host.Rollback(ctx, "swapper")
	if err != nil || v != "1.0.0" {
		t.Fatalf("Rollback = %q, %v", v, err)
	}
	if st, _ := b.host.Plugin("swapper"); st.Version != "1.0.0" || st.Previous != "" {
		t.Fatalf("after rollback: version %s, previous %q", st.Version, st.Previous)
	}
	waitCycles(t, b, "swapper", 3)

	recs := b.host.Records("swapper")
	requireExactCycles(t, recs, 4)
	var seq []string
	for _, r := range recs {
		if len(seq) == 0 || seq[len(seq)-1] != r.Version {
			seq = append(seq, r.Version)
		}
	}
	if !slices.Equal(seq, []string{"1.0.0", "2.0.0", "1.0.0"}) {
		t.Fatalf("served versions %v, want 1.0.0 then 2.0.0 then 1.0.0", seq)
	}
}

// TestUnshadowRemovesUploadedFile: an uploaded candidate is kept in the
// plugin directory's shadow/ (so it survives a restart); dropping the
// shadow removes that file, or the next start would load it again. A
// candidate loaded from the operator's own path is not touched.
func TestUnshadowRemovesUploadedFile(t *testing.T) {
	t.Parallel()
	b, _ := shadowSetup(t, false)
	ctx := context.Background()
	wasm, err := os.ReadFile(fixture(t, "delayed_promoter"))
	if err != nil {
		t.Fatal(err)
	}
	name, err := b.host.LoadShadowBytes(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(b.dir, host.ShadowDir, name+".wasm")
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("uploaded candidate not kept: %v", err)
	}
	if err := b.host.Unshadow(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kept); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s after the drop: %v; want it removed", kept, err)
	}

	own := candidate(t, "delayed_promoter")
	if _, err := b.host.LoadShadow(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := b.host.Unshadow(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own); err != nil {
		t.Fatalf("the operator's own candidate file: %v; want it left alone", err)
	}
}
