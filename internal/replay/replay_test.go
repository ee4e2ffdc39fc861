package replay_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/replay"
	"github.com/fabric-host/fabric/model"
)

var update = flag.Bool("update", false, "record the cases of testdata/replay anew and rewrite their golden files")

const caseDir = "../../testdata/replay"

// part is the partition the cases are recorded on.
var part = model.Partition{Family: model.FamilyFlow, Index: 5}

// sharedCache is the compilation cache the CLI and the other packages'
// tests share (~/.cache/fabric/wazero, which `make plugins` prewarms
// without -race: under -race a cold compile of a Go module takes seconds).
// FABRIC_TEST_WAZERO_CACHE overrides it; "off" uses a fresh directory.
func sharedCache(t *testing.T) string {
	t.Helper()
	switch env := os.Getenv("FABRIC_TEST_WAZERO_CACHE"); env {
	case "off":
		return t.TempDir()
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return t.TempDir()
		}
		dir := filepath.Join(base, "fabric", "wazero")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return t.TempDir()
		}
		return dir
	default:
		return env
	}
}

func pluginFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("../../bin/plugins", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (make plugins builds it)", p, err)
	}
	return p
}

// buildState gives partition part work for every default scanner: a due
// delayed execution, an expired lease, a timed-out attempt, an expired
// pending waitpoint, a timed-out suspension, an execution missing from
// its eligible index, a passed execution deadline.
func buildState(t *testing.T, ctx context.Context, c *valkey.Client) {
	t.Helper()
	now := func() int64 {
		ms, err := c.ServerTime(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	create := func(p valkey.CreateExecutionParams) model.ExecutionID {
		p.ExecutionID = model.NewExecutionID(part, model.NewUUID())
		p.LaneID, p.ExecutionKind = "default", "replay"
		if _, err := c.CreateExecution(ctx, &p); err != nil {
			t.Fatalf("create %s: %v", p.Namespace, err)
		}
		return p.ExecutionID
	}
	claim := func(eid model.ExecutionID, w string, leaseMs, attemptTimeoutMs int64) (valkey.LeaseFence, int) {
		attempt := model.NewUUID().String()
		r, err := c.IssueGrantAndClaim(ctx, &valkey.IssueGrantAndClaimParams{
			ExecutionID: eid, WorkerID: w, WorkerInstanceID: w + "-1", Lane: "default",
			LeaseID: model.NewUUID().String(), LeaseTTLMs: leaseMs, AttemptID: attempt, AttemptTimeoutMs: attemptTimeoutMs,
		})
		if err != nil {
			t.Fatalf("claim %s: %v", eid, err)
		}
		return valkey.LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: attempt}, r.AttemptIndex
	}
	raw := c.Raw()
	pk := model.KeysOn(part)
	if err := raw.Do(ctx, raw.B().Hset().Key(pk.WaitpointHMACSecrets()).FieldValue().FieldValue("current_kid", "k1").FieldValue("secret:k1", "00112233445566778899aabbccddeeff").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	create(valkey.CreateExecutionParams{Namespace: "delayed", DelayUntil: now() + 100})
	le := create(valkey.CreateExecutionParams{Namespace: "lease"})
	claim(le, "w-le", 100, 0)
	at := create(valkey.CreateExecutionParams{Namespace: "attempt"})
	claim(at, "w-at", 60_000, 100)
	pw := create(valkey.CreateExecutionParams{Namespace: "pending"})
	_, att := claim(pw, "w-pw", 60_000, 0)
	wp := model.NewUUID().String()
	if _, err := c.CreatePendingWaitpoint(ctx, &valkey.CreatePendingWaitpointParams{ExecutionID: pw, AttemptIndex: att, WaitpointID: wp, WaitpointKey: "k-" + wp[:8], ExpiresAt: now() + 100}); err != nil {
		t.Fatal(err)
	}
	st := create(valkey.CreateExecutionParams{Namespace: "suspended"})
	fence, att := claim(st, "w-st", 60_000, 0)
	cond := `{"condition_type":"signal_set","required_signal_names":["go"],"signal_match_mode":"any","minimum_signal_count":1,"timeout_behavior":"fail","allow_operator_override":true}`
	if _, err := c.SuspendExecution(ctx, &valkey.SuspendParams{
		ExecutionID: st, AttemptIndex: att, Fence: fence, SuspensionID: model.NewUUID().String(),
		WaitpointID: model.NewUUID().String(), WaitpointKey: "wk", ReasonCode: "waiting_for_signal", RequestedBy: "worker",
		TimeoutAt: now() + 100, ResumeConditionJSON: cond, ResumePolicyJSON: `{"resume_delay_ms":0}`, TimeoutBehavior: "fail",
	}); err != nil {
		t.Fatal(err)
	}
	ir := create(valkey.CreateExecutionParams{Namespace: "unindexed"})
	if err := raw.Do(ctx, raw.B().Zrem().Key(pk.LaneEligible("default")).Member(string(ir)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	create(valkey.CreateExecutionParams{Namespace: "deadline", ExecutionDeadlineAt: now() + 100})
	// Everything above is due once the server's clock passes it.
	deadline := now() + 200
	valkeytest.Eventually(t, 10*time.Second, "server clock past the state's due times", func() bool { return now() > deadline })
}

// TestReplayGolden replays the recorded case of every default scanner
// twice: the two outputs are the same bytes and match the golden file.
// With -update it builds the state on a test server, records a case per
// scanner and writes both files.
func TestReplayGolden(t *testing.T) {
	ctx := valkeytest.Context(t, 10*time.Minute)
	if *update {
		c := valkeytest.Client(t)
		buildState(t, ctx, c)
		before, err := replay.Snapshot(ctx, c.Raw())
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range host.DefaultPlugins {
			in, err := host.Inspect(ctx, pluginFile(t, name), host.InspectConfig{})
			if err != nil {
				t.Fatal(err)
			}
			cs, err := replay.Record(ctx, c, in.Manifest, "", part)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := cs.Write(&b); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(caseDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(caseDir, name+".case.json"), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		after, err := replay.Snapshot(ctx, c.Raw())
		if err != nil {
			t.Fatal(err)
		}
		if d := replay.Diff(before, after); len(d) > 0 {
			t.Fatalf("recording changed the recorded server: %v", d)
		}
	}
	cache := sharedCache(t)
	for _, name := range host.DefaultPlugins {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join(caseDir, name+".case.json"))
			if err != nil {
				t.Fatal(err)
			}
			cs, err := replay.ReadCase(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			// Two replays of the set-order-sensitive ones (a full sweep of
			// every default scanner twice takes minutes under -race).
			n := 1
			if name == "index_reconciler" || name == "delayed_promoter" || *update {
				n = 2
			}
			outs := make([]bytes.Buffer, n)
			for i := range outs {
				res, err := replay.Run(ctx, replay.Config{Wasm: pluginFile(t, name), Case: cs, CacheDir: cache})
				if err != nil {
					t.Fatalf("replay %d: %v", i+1, err)
				}
				if err := res.Write(&outs[i]); err != nil {
					t.Fatal(err)
				}
			}
			if n == 2 && !bytes.Equal(outs[0].Bytes(), outs[1].Bytes()) {
				t.Fatalf("two replays differ:\n--- first\n%s\n--- second\n%s", outs[0].String(), outs[1].String())
			}
			golden := filepath.Join(caseDir, name+".golden")
			if *update {
				if err := os.WriteFile(golden, outs[0].Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(outs[0].Bytes(), want) {
				t.Fatalf("replay of %s differs from %s:\n--- got\n%s\n--- want\n%s", name, golden, outs[0].String(), want)
			}
			if !strings.Contains(outs[0].String(), "actions ") {
				t.Fatalf("no actions section:\n%s", outs[0].String())
			}
		})
	}
}

// TestReplayActs checks what a replay reports on a case: the delayed
// promoter promotes the due execution, and the difference names it.
func TestReplayActs(t *testing.T) {
	ctx := valkeytest.Context(t, 5*time.Minute)
	f, err := os.Open(filepath.Join(caseDir, "delayed_promoter.case.json"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := replay.ReadCase(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Run(ctx, replay.Config{Wasm: pluginFile(t, "delayed_promoter"), Case: cs, CacheDir: sharedCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scan.Acted != 1 || len(res.Actions) != 1 || !strings.HasPrefix(res.Actions[0], "fcall ff_promote_delayed ") {
		t.Fatalf("acted %d, actions %q; want one ff_promote_delayed", res.Scan.Acted, res.Actions)
	}
	var moved bool
	for _, d := range res.Diff {
		if strings.HasPrefix(d, "+ ") && strings.Contains(d, `eligibility_state"="eligible_now"`) {
			moved = true
		}
	}
	if !moved {
		t.Fatalf("diff does not show the promotion: %q", res.Diff)
	}
}

// TestReadCaseRefusesMalformed feeds hostile case files to ReadCase.
func TestReadCaseRefusesMalformed(t *testing.T) {
	good := `{"format":"fabric-replay-case/1","plugin":"p","partition":"{fp:5}","tag":"{fp:5}","server_time_ms":1,"partitions":{"Flow":256,"Budget":32,"Quota":32},"keys":[]}`
	if _, err := replay.ReadCase(strings.NewReader(good)); err != nil {
		t.Fatalf("good case refused: %v", err)
	}
	for name, in := range map[string]string{
		"not json":         `{`,
		"other format":     strings.Replace(good, "case/1", "case/9", 1),
		"unknown field":    strings.Replace(good, `"plugin":"p"`, `"plugin":"p","x":1`, 1),
		"tag mismatch":     strings.Replace(good, `"tag":"{fp:5}"`, `"tag":"{fp:6}"`, 1),
		"partition range":  strings.ReplaceAll(good, "{fp:5}", "{fp:999}"),
		"no time":          strings.Replace(good, `"server_time_ms":1`, `"server_time_ms":0`, 1),
		"foreign key":      strings.Replace(good, `"keys":[]`, `"keys":[{"key":"ff:exec:{fp:6}:x:core","dump":""}]`, 1),
		"untagged key":     strings.Replace(good, `"keys":[]`, `"keys":[{"key":"config:evil","dump":""}]`, 1),
		"bad dump":         strings.Replace(good, `"keys":[]`, `"keys":[{"key":"ff:exec:{fp:5}:x:core","dump":"%%%"}]`, 1),
		"unsorted":         strings.Replace(good, `"keys":[]`, `"keys":[{"key":"ff:z:{fp:5}","dump":""},{"key":"ff:a:{fp:5}","dump":""}]`, 1),
		"negative ttl":     strings.Replace(good, `"keys":[]`, `"keys":[{"key":"ff:a:{fp:5}","pttl_ms":-5,"dump":""}]`, 1),
		"zero partitions":  strings.Replace(good, `"Flow":256`, `"Flow":0`, 1),
		"family not known": strings.ReplaceAll(good, "{fp:5}", "{zz:5}"),
	} {
		if _, err := replay.ReadCase(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestCompareFindsTheChangedExecutions replays the stock delayed promoter
// and a deliberately changed one (it never reads the lane "slow") on one
// recorded case holding a due execution on each of two lanes: the
// comparison names exactly the slow lane's promotion.
func TestCompareFindsTheChangedExecutions(t *testing.T) {
	ctx := valkeytest.Context(t, 5*time.Minute)
	c := valkeytest.Client(t)
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{"default", "slow"}}); err != nil {
		t.Fatal(err)
	}
	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]model.ExecutionID{}
	for _, lane := range []string{"default", "slow"} {
		ids[lane] = model.NewExecutionID(part, model.NewUUID())
		if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: ids[lane], Namespace: "cmp", LaneID: lane, ExecutionKind: "k", DelayUntil: now + 50}); err != nil {
			t.Fatal(err)
		}
	}
	valkeytest.Eventually(t, 10*time.Second, "both due", func() bool {
		ms, err := c.ServerTime(ctx)
		return err == nil && ms > now+100
	})
	in, err := host.Inspect(ctx, pluginFile(t, "delayed_promoter"), host.InspectConfig{CacheDir: sharedCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := replay.Record(ctx, c, in.Manifest, in.SHA256, part)
	if err != nil {
		t.Fatal(err)
	}
	live, err := replay.Run(ctx, replay.Config{Wasm: pluginFile(t, "delayed_promoter"), Case: cs, CacheDir: sharedCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	candidate, err := replay.Run(ctx, replay.Config{Wasm: "../../testdata/plugins/promoter_skipslow.wasm", Case: cs, CacheDir: sharedCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Actions) != 2 || len(candidate.Actions) != 1 {
		t.Fatalf("live %d actions, candidate %d; want 2 and 1:\n%q\n%q", len(live.Actions), len(candidate.Actions), live.Actions, candidate.Actions)
	}
	diff := replay.Compare(live, candidate)
	if len(diff) != 1 || !strings.HasPrefix(diff[0], "- fcall ff_promote_delayed ") || !strings.Contains(diff[0], string(ids["slow"])) {
		t.Fatalf("comparison = %q; want the slow lane's promotion (%s) only in the live version", diff, ids["slow"])
	}
	if d := replay.Compare(live, live); len(d) != 0 {
		t.Fatalf("a version compared with itself differs: %q", d)
	}
}
