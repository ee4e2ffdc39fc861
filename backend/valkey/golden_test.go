package valkey_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden_keyspace.txt from today's library")

// Offsets (ms) the golden sequence adds to the server clock. They are
// far apart (>= 10^8 ms, about a day) so a normalised timestamp names the
// offset it carries unambiguously; each is a round number a leaner
// function must still add exactly.
const (
	gLeaseTTL    = 300_000_000
	gRenewBefore = 200_000_000
	gGrantTTL    = 400_000_000
	gDelay       = 500_000_000
	gRetryDelay  = 700_000_000
	gAttemptTO   = 800_000_000
	gSuspendTO   = 900_000_000
	gDeadline    = 4_102_444_800_000 // an absolute deadline: 2100-01-01
)

var gOffsets = []struct {
	name string
	d    int64
}{
	{"", 0}, {"lease_ttl", gLeaseTTL}, {"renew_before", gRenewBefore}, {"grant_ttl", gGrantTTL},
	{"delay", gDelay}, {"delay+1", gDelay + 1}, {"retry_delay", gRetryDelay}, {"attempt_timeout", gAttemptTO},
	{"suspend_timeout", gSuspendTO}, {"day", 86_400_000}, {"lease_ttl-renew_before", gLeaseTTL - gRenewBefore},
}

// golden records a fixed call sequence: every reply, then the keyspace.
type golden struct {
	t      *testing.T
	ctx    context.Context
	c      *valkey.Client
	lo, hi int64 // server clock bounds of the run (ms)
	lines  []string
}

func (g *golden) now() int64 {
	g.t.Helper()
	n, err := g.c.ServerTime(g.ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	return n
}

// step records one call's reply: its decoded result, or its error with
// the code and details.
func (g *golden) step(name string, v any, err error) {
	g.t.Helper()
	if err != nil {
		var le *valkey.LuaError
		if errors.As(err, &le) {
			g.lines = append(g.lines, fmt.Sprintf("%s -> error %s %q", name, le.Code, le.Details))
		} else {
			g.t.Fatalf("%s: %v", name, err)
		}
		return
	}
	b, jerr := json.Marshal(v)
	if jerr != nil {
		g.t.Fatal(jerr)
	}
	g.lines = append(g.lines, fmt.Sprintf("%s -> %s", name, b))
}

// must records a call that has to succeed for the sequence to go on.
func (g *golden) must(name string, v any, err error) {
	g.t.Helper()
	if err != nil {
		g.t.Fatalf("%s: %v", name, err)
	}
	g.step(name, v, nil)
}

var (
	reStreamID = regexp.MustCompile(`\b1\d{12}-\d+\b`)
	reHMAC     = regexp.MustCompile(`\b[0-9a-f]{40}\b`)
	reBigInt   = regexp.MustCompile(`-?\d{10,}`)
)

// norm replaces stream ids, HMAC digests and server-clock numbers by
// stable names: <T> for a timestamp of the run, <T+name> for one that
// carries a known offset, <T-p·1e12> for an eligible score of priority p.
func (g *golden) norm(s string) string {
	s = reStreamID.ReplaceAllString(s, "<sid>")
	s = reHMAC.ReplaceAllString(s, "<hmac>")
	const slack = int64(time.Hour / time.Millisecond)
	lo, hi := g.lo-slack, g.hi+slack
	in := func(n int64) bool { return n >= lo && n <= hi }
	return reBigInt.ReplaceAllStringFunc(s, func(m string) string {
		n, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return m
		}
		for _, o := range gOffsets {
			if in(n - o.d) {
				if o.name == "" {
					return "<T>"
				}
				return "<T+" + o.name + ">"
			}
		}
		if n < 0 {
			p := (lo - n) / 1_000_000_000_000
			for _, q := range []int64{p, p + 1} {
				if in(n + q*1_000_000_000_000) {
					return fmt.Sprintf("<T-%d·1e12>", q)
				}
			}
		}
		return m
	})
}

// dump is the whole keyspace as text, type-aware and sorted: hash fields,
// set members and zset entries sorted, stream entries in order (ids
// normalised), and each key's absolute expiry.
func (g *golden) dump() []string {
	g.t.Helper()
	raw := g.c.Raw()
	ctx := g.ctx
	var keys []string
	var cursor uint64
	for {
		e, err := raw.Do(ctx, raw.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			g.t.Fatal(err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		typ, err := raw.Do(ctx, raw.B().Type().Key(k).Build()).ToString()
		if err != nil {
			g.t.Fatal(err)
		}
		exp, err := raw.Do(ctx, raw.B().Pexpiretime().Key(k).Build()).AsInt64()
		if err != nil {
			g.t.Fatal(err)
		}
		head := fmt.Sprintf("%s %s", typ, k)
		if exp > 0 {
			head += fmt.Sprintf(" expires %d", exp)
		}
		out = append(out, head)
		var body []string
		switch typ {
		case "string":
			v, err := raw.Do(ctx, raw.B().Get().Key(k).Build()).ToString()
			if err != nil {
				g.t.Fatal(err)
			}
			body = []string{v}
		case "hash":
			m, err := raw.Do(ctx, raw.B().Hgetall().Key(k).Build()).AsStrMap()
			if err != nil {
				g.t.Fatal(err)
			}
			for f, v := range m {
				body = append(body, f+" = "+v)
			}
			sort.Strings(body)
		case "set":
			m, err := raw.Do(ctx, raw.B().Smembers().Key(k).Build()).AsStrSlice()
			if err != nil {
				g.t.Fatal(err)
			}
			body = m
			sort.Strings(body)
		case "zset":
			zs, err := raw.Do(ctx, raw.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil {
				g.t.Fatal(err)
			}
			for _, z := range zs {
				body = append(body, fmt.Sprintf("%s @ %s", z.Member, strconv.FormatFloat(z.Score, 'f', -1, 64)))
			}
			sort.Strings(body)
		case "stream":
			// Raw XRANGE: an entry's field order is what readers see.
			xs, err := raw.Do(ctx, raw.B().Xrange().Key(k).Start("-").End("+").Build()).ToArray()
			if err != nil {
				g.t.Fatal(err)
			}
			for _, x := range xs {
				parts, err := x.ToArray()
				if err != nil || len(parts) != 2 {
					g.t.Fatalf("XRANGE %s entry: %v", k, err)
				}
				id, _ := parts[0].ToString()
				fv, err := parts[1].AsStrSlice()
				if err != nil {
					g.t.Fatal(err)
				}
				body = append(body, id+" "+strings.Join(fv, " "))
			}
		case "list":
			m, err := raw.Do(ctx, raw.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
			if err != nil {
				g.t.Fatal(err)
			}
			body = m
		default:
			g.t.Fatalf("key %s: type %s not dumped", k, typ)
		}
		for _, b := range body {
			out = append(out, "  "+b)
		}
	}
	return out
}

func gUUID(n int) model.UUID {
	u, err := model.ParseUUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", n))
	if err != nil {
		panic(err)
	}
	return u
}

// TestGoldenKeyspace runs a fixed sequence of ff_* calls covering the
// execution state machine (create, delayed, grant, claim, renew, progress,
// frames, complete, fail with retry, delay, promote, suspend / signal /
// resume / claim resumed, cancel, lease expiry and reclaim, priority,
// flows and edges, budgets, quotas) and compares every reply and the
// whole keyspace afterwards with testdata/golden_keyspace.txt, recorded
// from the library before it was made leaner. -update rewrites the file.
func TestGoldenKeyspace(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	g := &golden{t: t, ctx: valkeytest.Context(t, 60*time.Second), c: c}
	ctx := g.ctx
	g.lo = g.now()
	// Published messages of the run (the channel is server-wide: only
	// those naming the run's fixed ids are kept).
	var pubMu sync.Mutex
	var published []string
	subCtx, stopSub := context.WithCancel(ctx)
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		_ = c.Raw().Receive(subCtx, c.Raw().B().Psubscribe().Pattern("*").Build(), func(m vk.PubSubMessage) {
			if strings.Contains(m.Message, "00000000-0000-4000-8000-") || m.Channel == "golden-marker" {
				pubMu.Lock()
				published = append(published, m.Channel+" "+m.Message)
				pubMu.Unlock()
			}
		})
	}()
	valkeytest.Eventually(t, 10*time.Second, "subscribed", func() bool {
		_ = c.Raw().Do(ctx, c.Raw().B().Publish().Channel("golden-marker").Message("golden-marker").Build()).Error()
		pubMu.Lock()
		defer pubMu.Unlock()
		return len(published) > 0
	})
	pubMu.Lock()
	published = nil
	pubMu.Unlock()
	cfg := model.DefaultPartitionConfig()
	lane := "default"
	solo := cfg.SoloPartition(lane)
	eid := func(n int) model.ExecutionID { return model.NewExecutionID(solo, gUUID(n)) }
	grant := func(name string, id model.ExecutionID, w string) {
		g.step(name+" grant", nil, c.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: id,
			WorkerID: w, WorkerInstanceID: w + "-i", Lane: lane, GrantTTLMs: gGrantTTL}))
	}
	claim := func(name string, id model.ExecutionID, w string, n int, ttl int64) *valkey.ClaimResult {
		res, err := c.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: w,
			WorkerInstanceID: w + "-i", LaneID: lane, LeaseID: gUUID(1000 + n).String(),
			AttemptID: gUUID(2000 + n).String(), LeaseTTLMs: ttl, RenewBeforeMs: gRenewBefore,
			AttemptPolicyJSON: `{"timeout_ms":5,"tags":{"a":1}}`, AttemptTimeoutMs: gAttemptTO,
			ExecutionDeadlineAt: gDeadline})
		g.must(name+" claim", res, err)
		return res
	}
	promote := func(name string, id model.ExecutionID, at int64) {
		st, err := c.PromoteDelayed(ctx, &valkey.PromoteDelayedParams{ExecutionID: id, Lane: lane, NowMs: at})
		g.step(name+" promote", st, err)
	}

	// A: create (idempotency key, tags, payload), duplicate, grant, claim,
	// renew, progress, a frame, complete, a replayed complete.
	a := eid(1)
	createA := &valkey.CreateExecutionParams{ExecutionID: a, Namespace: "ns", LaneID: lane, ExecutionKind: "k",
		Priority: 0, CreatorIdentity: "golden", PolicyJSON: `{"max_retries":0}`, Payload: "payload-a",
		IdempotencyKey: "idem-a", DedupTTL: time.Duration(gGrantTTL) * time.Millisecond,
		Tags: map[string]string{"team": "x"}, ExecutionDeadlineAt: gDeadline}
	res, err := c.CreateExecution(ctx, createA)
	g.must("A create", res, err)
	res, err = c.CreateExecution(ctx, createA)
	g.step("A create again", res, err)
	grant("A", a, "w1")
	ga := claim("A", a, "w1", 1, gLeaseTTL)
	exp, err := c.RenewLease(ctx, &valkey.RenewLeaseParams{ExecutionID: a, AttemptIndex: ga.AttemptIndex,
		AttemptID: ga.AttemptID, LeaseID: ga.LeaseID, LeaseEpoch: ga.LeaseEpoch, LeaseTTLMs: gLeaseTTL})
	g.step("A renew", exp, err)
	g.step("A progress", nil, c.UpdateProgress(ctx, &valkey.UpdateProgressParams{ExecutionID: a,
		LeaseID: ga.LeaseID, LeaseEpoch: ga.LeaseEpoch, Pct: "50", Message: "half"}))
	fr, err := c.AppendFrame(ctx, &valkey.AppendFrameParams{ExecutionID: a, AttemptIndex: ga.AttemptIndex,
		Fence: ga.Fence(), FrameType: "log", Payload: "hello", Encoding: "utf8", Source: "worker"})
	g.step("A frame", fr, err)
	g.step("A complete", nil, c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: a,
		Fence: ga.Fence(), Result: "result-a"}))
	g.step("A complete again", nil, c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: a,
		Fence: ga.Fence(), Result: "result-a"}))

	// B: delayed create, promote, claim, fail with retry (backoff),
	// promote, claim the retry, delay, promote, claim, fail for good.
	b := eid(2)
	now := g.now()
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: b, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", Priority: 3, CreatorIdentity: "golden", PolicyJSON: "{}", DelayUntil: now + gDelay})
	g.must("B create delayed", res, err)
	grant("B (not eligible)", b, "w1")
	promote("B early", b, now)
	promote("B", b, now+gDelay+1)
	grant("B", b, "w1")
	gb := claim("B", b, "w1", 2, gLeaseTTL)
	retry := `{"max_retries":1,"backoff":{"type":"fixed","delay_ms":700000000}}`
	fres, err := c.FailExecution(ctx, &valkey.FailExecutionParams{ExecutionID: b, Fence: gb.Fence(),
		FailureReason: "boom", FailureCategory: "transient", RetryPolicyJSON: retry})
	g.step("B fail (retry)", fres, err)
	promote("B retry", b, g.now()+gRetryDelay+1)
	grant("B retry", b, "w2")
	gb = claim("B retry", b, "w2", 3, gLeaseTTL)
	now = g.now()
	g.step("B delay", nil, c.DelayExecution(ctx, &valkey.DelayExecutionParams{ExecutionID: b, Fence: gb.Fence(),
		DelayUntil: now + gDelay}))
	promote("B delayed", b, now+gDelay+1)
	grant("B after delay", b, "w1")
	_, err = c.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: b, WorkerID: "w1",
		WorkerInstanceID: "w1-i", LaneID: lane, LeaseID: gUUID(1012).String(), AttemptID: gUUID(2012).String(),
		LeaseTTLMs: gLeaseTTL, RenewBeforeMs: gRenewBefore})
	g.step("B after delay plain claim", nil, err)
	br, err := c.ClaimResumedExecution(ctx, &valkey.ClaimResumedParams{ExecutionID: b, WorkerID: "w1",
		WorkerInstanceID: "w1-i", Lane: lane, LeaseID: gUUID(1013).String(), LeaseTTLMs: gLeaseTTL})
	g.must("B after delay claim resumed", br, err)
	fres, err = c.FailExecution(ctx, &valkey.FailExecutionParams{ExecutionID: b,
		Fence:         valkey.LeaseFence{LeaseID: br.LeaseID, LeaseEpoch: br.LeaseEpoch, AttemptID: br.AttemptID},
		FailureReason: "boom again", FailureCategory: "permanent", RetryPolicyJSON: retry})
	g.step("B fail (final)", fres, err)

	// C: claim, suspend on a signal, deliver it (resume), claim resumed,
	// complete.
	cc := eid(3)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: cc, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", CreatorIdentity: "golden", PolicyJSON: "{}"})
	g.must("C create", res, err)
	if err := c.Raw().Do(ctx, c.Raw().B().Hset().Key(model.KeysOn(solo).WaitpointHMACSecrets()).FieldValue().
		FieldValue("current_kid", "k1").FieldValue("secret:k1", "c0ffee").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	grant("C", cc, "w1")
	gc := claim("C", cc, "w1", 5, gLeaseTTL)
	sp := &valkey.SuspendParams{ExecutionID: cc, AttemptIndex: gc.AttemptIndex, Fence: gc.Fence(),
		SuspensionID: gUUID(3001).String(), WaitpointID: gUUID(3002).String(), WaitpointKey: "wpk-c",
		ReasonCode: "waiting_for_signal", RequestedBy: "worker", ResumeConditionJSON: signalCond("any", 1, "approve"),
		ResumePolicyJSON: `{"resume_delay_ms":0}`, TimeoutAt: g.now() + gSuspendTO, TimeoutBehavior: "fail"}
	sres, err := c.SuspendExecution(ctx, sp)
	g.must("C suspend", sres, err)
	sig := &valkey.SignalParams{SignalID: gUUID(3003).String(), ExecutionID: cc, WaitpointID: sres.Waitpoint.WaitpointID,
		SignalName: "nope", SignalCategory: "external", SourceType: "webhook", SourceIdentity: "src",
		Payload: `{"ok":true}`, WaitpointToken: sres.Waitpoint.Token, CreatedAt: g.now()}
	sr, err := c.DeliverSignal(ctx, sig)
	g.step("C signal (no match)", sr, err)
	sig.SignalID, sig.SignalName = gUUID(3004).String(), "approve"
	sr, err = c.DeliverSignal(ctx, sig)
	g.step("C signal (approve)", sr, err)
	grant("C resumed", cc, "w2")
	cr, err := c.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: cc, WorkerID: "w2",
		WorkerInstanceID: "w2-i", LaneID: lane, LeaseID: gUUID(1006).String(), AttemptID: gUUID(2006).String(),
		LeaseTTLMs: gLeaseTTL, RenewBeforeMs: gRenewBefore})
	g.step("C plain claim (interrupted?)", cr, err)
	crr, err := c.ClaimResumedExecution(ctx, &valkey.ClaimResumedParams{ExecutionID: cc, WorkerID: "w2",
		WorkerInstanceID: "w2-i", Lane: lane, LeaseID: gUUID(1007).String(), LeaseTTLMs: gLeaseTTL})
	g.step("C claim resumed", crr, err)
	if crr != nil {
		g.step("C complete", nil, c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: cc,
			Fence: valkey.LeaseFence{LeaseID: crr.LeaseID, LeaseEpoch: crr.LeaseEpoch, AttemptID: crr.AttemptID}}))
	}

	// D: a lease that expires, marked, reclaimed, then cancelled while
	// active.
	d := eid(4)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: d, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", CreatorIdentity: "golden", PolicyJSON: "{}"})
	g.must("D create", res, err)
	grant("D", d, "w1")
	gd := claim("D", d, "w1", 8, 1)
	valkeytest.Eventually(t, 10*time.Second, "lease of D expired", func() bool { return g.now() > gd.ExpiresAt })
	mk, err := c.MarkLeaseExpiredIfDue(ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: d})
	g.step("D mark expired", mk, err)
	n, err := c.IssueReclaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: d, WorkerID: "w2",
		WorkerInstanceID: "w2-i", Lane: lane, GrantTTLMs: gGrantTTL})
	g.step("D reclaim grant", n, err)
	rc, err := c.ReclaimExecution(ctx, &valkey.ReclaimExecutionParams{ExecutionID: d, WorkerID: "w2",
		WorkerInstanceID: "w2-i", LaneID: lane, LeaseID: gUUID(1009).String(), AttemptID: gUUID(2009).String(),
		LeaseTTLMs: gLeaseTTL})
	g.step("D reclaim", rc, err)
	st, err := c.CancelExecution(ctx, &valkey.CancelExecutionParams{ExecutionID: d, Reason: "stop",
		Source: valkey.SourceOperatorOverride})
	g.step("D cancel (active)", st, err)

	// E: priority change, then cancel while eligible; F: expire an active
	// execution.
	e := eid(5)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: e, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", Priority: 1, CreatorIdentity: "golden", PolicyJSON: "{}"})
	g.must("E create", res, err)
	pr, err := c.ChangePriority(ctx, e, 7)
	g.step("E priority", pr, err)
	st, err = c.CancelExecution(ctx, &valkey.CancelExecutionParams{ExecutionID: e, Reason: "unwanted",
		Source: valkey.SourceOperatorOverride})
	g.step("E cancel (eligible)", st, err)
	f := eid(6)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: f, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", CreatorIdentity: "golden", PolicyJSON: "{}"})
	g.must("F create", res, err)
	grant("F", f, "w1")
	claim("F", f, "w1", 10, gLeaseTTL)
	xr, err := c.ExpireExecution(ctx, &valkey.ExpireExecutionParams{ExecutionID: f, Reason: "attempt_timeout"})
	g.step("F expire", xr, err)

	// G stays eligible: a priority change and an unused grant remain in
	// the keyspace.
	gg := eid(7)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: gg, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", Priority: 2, CreatorIdentity: "golden", PolicyJSON: "{}", Payload: "payload-g"})
	g.must("G create", res, err)
	pr, err = c.ChangePriority(ctx, gg, 7)
	g.step("G priority", pr, err)
	grant("G", gg, "w3")
	grant("G again", gg, "w3")

	// H: the operator's grant-and-claim (fresh attempt), a delay, a
	// grant-and-claim of the interrupted attempt, complete.
	h := eid(8)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: h, Namespace: "ns", LaneID: lane,
		ExecutionKind: "k", CreatorIdentity: "golden", PolicyJSON: "{}"})
	g.must("H create", res, err)
	gc1, err := c.IssueGrantAndClaim(ctx, &valkey.IssueGrantAndClaimParams{ExecutionID: h, WorkerID: "w4",
		WorkerInstanceID: "w4-i", Lane: lane, LeaseID: gUUID(1020).String(), LeaseTTLMs: gLeaseTTL,
		AttemptID: gUUID(2020).String(), AttemptPolicyJSON: `{"timeout_ms":5}`, AttemptTimeoutMs: gAttemptTO,
		ExecutionDeadlineAt: gDeadline})
	g.must("H grant and claim", gc1, err)
	hf := valkey.LeaseFence{LeaseID: gc1.LeaseID, LeaseEpoch: gc1.LeaseEpoch, AttemptID: gUUID(2020).String()}
	now = g.now()
	g.step("H delay", nil, c.DelayExecution(ctx, &valkey.DelayExecutionParams{ExecutionID: h, Fence: hf,
		DelayUntil: now + gDelay}))
	promote("H", h, now+gDelay+1)
	gc2, err := c.IssueGrantAndClaim(ctx, &valkey.IssueGrantAndClaimParams{ExecutionID: h, WorkerID: "w4",
		WorkerInstanceID: "w4-i", Lane: lane, LeaseID: gUUID(1021).String(), LeaseTTLMs: gLeaseTTL})
	g.must("H grant and claim (resumed)", gc2, err)
	g.step("H complete", nil, c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: h,
		Fence: valkey.LeaseFence{LeaseID: gc2.LeaseID, LeaseEpoch: gc2.LeaseEpoch, AttemptID: gUUID(2020).String()}}))
	gc3, err := c.IssueGrantAndClaim(ctx, &valkey.IssueGrantAndClaimParams{ExecutionID: h, WorkerID: "w4",
		WorkerInstanceID: "w4-i", Lane: lane, LeaseID: gUUID(1022).String(), LeaseTTLMs: gLeaseTTL})
	g.step("H grant and claim (terminal)", gc3, err)

	// Flow: parent P and child Q, an edge, P completes, Q resolves.
	flow := gUUID(4000)
	fp := cfg.FlowPartition(flow)
	p, q := model.NewExecutionID(fp, gUUID(4001)), model.NewExecutionID(fp, gUUID(4002))
	now = g.now()
	existed, err := c.CreateFlow(ctx, flow, "dag", "ns", now)
	g.step("flow create", existed, err)
	for _, m := range []struct {
		name string
		id   model.ExecutionID
	}{{"P", p}, {"Q", q}} {
		res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: m.id, Namespace: "ns",
			LaneID: lane, ExecutionKind: "k", CreatorIdentity: "golden", PolicyJSON: "{}"})
		g.must(m.name+" create", res, err)
		nodes, ex, err := c.AddExecutionToFlow(ctx, flow, m.id, now)
		g.step(m.name+" add to flow", []any{nodes, ex}, err)
	}
	edge := &valkey.EdgeParams{Flow: flow, EdgeID: gUUID(4003), Upstream: p, Downstream: q, Kind: "success_only",
		GraphRevision: 2, NowMs: now}
	rev, err := c.StageDependencyEdge(ctx, edge)
	g.step("edge stage", rev, err)
	edge.GraphRevision = rev
	un, already, err := c.ApplyDependencyToChild(ctx, edge)
	g.step("edge apply", []any{un, already}, err)
	res, err = c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: p, Namespace: "ns",
		LaneID: lane, ExecutionKind: "k", CreatorIdentity: "golden", PolicyJSON: "{}"})
	g.step("P create again", res, err)
	if err := c.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: p, WorkerID: "w1",
		WorkerInstanceID: "w1-i", Lane: lane, GrantTTLMs: gGrantTTL}); err != nil {
		t.Fatal(err)
	}
	g.step("P grant", nil, nil)
	gp := claim("P", p, "w1", 11, gLeaseTTL)
	g.step("P complete", nil, c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: p,
		Fence: gp.Fence(), Result: "result-p"}))
	rr, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: edge.EdgeID.String(),
		Upstream: p, Downstream: q, UpstreamOutcome: "success", NowMs: g.now()})
	g.step("Q resolve", rr, err)

	// Budget and quota.
	now = g.now()
	bres, err := c.CreateBudget(ctx, &valkey.CreateBudgetParams{BudgetID: gUUID(5000), ScopeType: "lane",
		ScopeID: lane, EnforcementMode: "strict", OnHardLimit: "fail", OnSoftLimit: "warn", NowMs: now,
		Dimensions: []valkey.BudgetDimension{{Name: "tokens", Hard: 100, Soft: 50}}})
	g.step("budget create", bres, err)
	for i, delta := range []int64{40, 20, 60} {
		ur, err := c.ReportUsage(ctx, &valkey.ReportUsageParams{BudgetID: gUUID(5000),
			Deltas: []valkey.UsageDelta{{Dimension: "tokens", Delta: delta}}, NowMs: now,
			DedupID: fmt.Sprintf("u%d", i), ExecutionID: a})
		g.step(fmt.Sprintf("budget usage %d", delta), ur, err)
	}
	qe, err := c.CreateQuotaPolicy(ctx, &valkey.CreateQuotaPolicyParams{QuotaID: gUUID(6000), WindowSeconds: 60,
		MaxRequestsPerWindow: 1, MaxConcurrent: 5, NowMs: now})
	g.step("quota create", qe, err)
	for _, id := range []model.ExecutionID{e, f} {
		ar, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: gUUID(6000), Dimension: "default",
			NowMs: now, WindowSeconds: 60, RateLimit: 1, ConcurrencyCap: 5, ExecutionID: id})
		g.step("quota admission", ar, err)
	}

	g.hi = g.now()
	_ = c.Raw().Do(ctx, c.Raw().B().Publish().Channel("golden-marker").Message("golden-end").Build()).Error()
	valkeytest.Eventually(t, 10*time.Second, "published messages drained", func() bool {
		pubMu.Lock()
		defer pubMu.Unlock()
		return len(published) > 0 && published[len(published)-1] == "golden-marker golden-end"
	})
	stopSub()
	<-subDone
	g.lines = append(g.lines, "", "# published")
	for _, m := range published {
		if !strings.HasPrefix(m, "golden-marker ") {
			g.lines = append(g.lines, m)
		}
	}
	var text []string
	for _, l := range g.lines {
		text = append(text, g.norm(l))
	}
	text = append(text, "", "# keyspace")
	for _, l := range g.dump() {
		text = append(text, g.norm(l))
	}
	got := strings.Join(text, "\n") + "\n"
	path := filepath.Join("testdata", "golden_keyspace.txt")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (record it with -update from a library known to be right)", err)
	}
	if got != string(want) {
		t.Errorf("replies or keyspace differ from %s:\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff shows the first differing lines of want and got, positionally.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			out = append(out, fmt.Sprintf("line %d\n  want: %s\n  got:  %s", i+1, a, b))
		}
		if len(out) == 20 {
			out = append(out, "...")
			break
		}
	}
	return strings.Join(out, "\n")
}
