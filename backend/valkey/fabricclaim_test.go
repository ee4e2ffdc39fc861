package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// claimDump renders every key of a database as tokens: name, type, the
// absolute expiry (PEXPIRETIME), then the content in an order that does
// not depend on the values (hash fields and set/zset members sorted by
// name, stream entries in order with their ids replaced by ordinals).
func claimDump(t *testing.T, ctx context.Context, raw vk.Client) [][]string {
	t.Helper()
	var names []string
	var cursor uint64
	for {
		e, err := raw.Do(ctx, raw.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(names)
	var out [][]string
	for _, k := range names {
		typ, err := raw.Do(ctx, raw.B().Type().Key(k).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		exp, err := raw.Do(ctx, raw.B().Pexpiretime().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		row := []string{k, typ, strconv.FormatInt(exp, 10)}
		switch typ {
		case "string":
			v, err := raw.Do(ctx, raw.B().Get().Key(k).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			row = append(row, v)
		case "hash":
			m, err := raw.Do(ctx, raw.B().Hgetall().Key(k).Build()).AsStrMap()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range slices.Sorted(mapKeys(m)) {
				row = append(row, f, m[f])
			}
		case "set":
			m, err := raw.Do(ctx, raw.B().Smembers().Key(k).Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(m)
			row = append(row, m...)
		case "zset":
			zs, err := raw.Do(ctx, raw.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(zs, func(a, b vk.ZScore) int { return strings.Compare(a.Member, b.Member) })
			for _, z := range zs {
				row = append(row, z.Member, strconv.FormatFloat(z.Score, 'f', -1, 64))
			}
		case "stream":
			es, err := raw.Do(ctx, raw.B().Xrange().Key(k).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				row = append(row, "#"+strconv.Itoa(i))
				for _, f := range slices.Sorted(mapKeys(e.FieldValues)) {
					row = append(row, f, e.FieldValues[f])
				}
			}
		default:
			t.Fatalf("key %s: type %s not dumped", k, typ)
		}
		out = append(out, row)
	}
	return out
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sameUpToClock compares two dumps (or replies) token by token: tokens are
// equal, or both are numbers that differ by one offset d for the whole
// comparison, the clock difference between the two runs (0 < d < 60 s;
// the second run starts after the server clock moved on). Every timestamp
// the calls write is now or now plus a fixed amount, so one offset
// accounts for all of them; any other difference fails.
type clockCmp struct {
	d   int64
	set bool
	// span, when set, is the range of offsets allowed instead of one
	// learnt offset (calls by id ran at several clock readings).
	span *[2]int64
}

func (c *clockCmp) same(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || x < 1e12 || y < 1e12 {
		return false
	}
	if c.span != nil {
		return y-x >= c.span[0] && y-x <= c.span[1]
	}
	if !c.set {
		c.d, c.set = y-x, true
		return c.d > 0 && c.d < 60_000
	}
	return y-x == c.d
}

func (c *clockCmp) diff(a, b [][]string) string {
	var out []string
	for i := 0; i < max(len(a), len(b)); i++ {
		var ra, rb []string
		if i < len(a) {
			ra = a[i]
		}
		if i < len(b) {
			rb = b[i]
		}
		ok := len(ra) == len(rb)
		for j := 0; ok && j < len(ra); j++ {
			ok = c.same(ra[j], rb[j])
		}
		if !ok {
			out = append(out, fmt.Sprintf("\n  two calls: %q\n  one call:  %q", ra, rb))
		}
	}
	return strings.Join(out, "")
}

// copyKeyspace copies every key of src into dst (DUMP / RESTORE ABSTTL).
func copyKeyspace(t *testing.T, ctx context.Context, src, dst vk.Client) {
	t.Helper()
	var cursor uint64
	for {
		e, err := src.Do(ctx, src.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			d, err := src.Do(ctx, src.B().Dump().Key(k).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			exp, err := src.Do(ctx, src.B().Pexpiretime().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			ttl := max(exp, 0)
			if err := dst.Do(ctx, dst.B().Restore().Key(k).Ttl(ttl).SerializedValue(d).Replace().Absttl().Build()).Error(); err != nil {
				t.Fatalf("RESTORE %s: %v", k, err)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

// replyTokens renders a call's outcome: the LuaError code and details, or
// the success fields.
func replyTokens(rep *valkey.Reply, err error) []string {
	var le *valkey.LuaError
	switch {
	case errors.As(err, &le):
		return append([]string{"error", string(le.Code)}, le.Details...)
	case err != nil:
		return []string{"transport", err.Error()}
	}
	return append([]string{"ok", rep.Status}, rep.Fields...)
}

// fabric_claim_execution leaves exactly the keyspace (every key, field,
// score, stream entry and expiry; timestamps up to one clock offset) and
// answers what ff_issue_claim_grant followed by ff_claim_execution leave
// and answer, for a fresh claim, a retry, a replay, an interrupted
// attempt, and every refusal of either call.
func TestFabricClaimMatchesGrantThenClaim(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 120*time.Second)
	const lane, worker, wiid = "l", "w1", "w1-i1"
	policy := `{"priority":0,"timeout_policy":{"attempt_timeout_ms":60000,"max_reclaim_count":100},"max_reclaim_count":100,"max_replay_count":10,"budget_ids":[],"max_signals_per_execution":10000}`
	type setup func(t *testing.T, c *valkey.Client, id model.ExecutionID)
	create := func(pol string, delay int64) setup {
		return func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: lane,
				ExecutionKind: "kind", Priority: 3, CreatorIdentity: "test", Payload: "in", PolicyJSON: pol, DelayUntil: delay}); err != nil {
				t.Fatal(err)
			}
		}
	}
	claimOnce := func(t *testing.T, c *valkey.Client, id model.ExecutionID) valkey.LeaseFence {
		if err := c.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: "w0", WorkerInstanceID: "w0-i",
			Lane: lane, GrantTTLMs: 5000}); err != nil {
			t.Fatal(err)
		}
		cr, err := c.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: "w0", WorkerInstanceID: "w0-i",
			LaneID: lane, LeaseTTLMs: 30000})
		if err != nil {
			t.Fatal(err)
		}
		return cr.Fence()
	}
	promote := func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
		now, err := c.ServerTime(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.PromoteDelayed(ctx, &valkey.PromoteDelayedParams{ExecutionID: id, Lane: lane, NowMs: now}); err != nil || st != valkey.PromoteStatus("promoted") {
			t.Fatalf("promote: %v %v", st, err)
		}
	}
	fresh := create(policy, 0)
	type tc struct {
		name  string
		setup []setup
		// edit changes the claim params of both runs; grantTTL is the grant's.
		edit       func(p *valkey.ClaimExecutionParams)
		caps       []string
		grantTTL   int64
		fromPolicy bool   // the one call reads the timeout; the two calls pass it
		rawArg     [2]any // {index, value}: an ARGV of the claim set verbatim
		wantCode   string // "" = success
	}
	cases := []tc{
		{name: "fresh claim", setup: []setup{fresh}, edit: func(p *valkey.ClaimExecutionParams) {
			p.AttemptPolicyJSON = `{"a":1,"b":{"c":[2,3]},"d":"x"}`
			p.AttemptTimeoutMs = 60000
			p.ExecutionDeadlineAt = 4102444800000
		}},
		{name: "timeout read from the stored policy", setup: []setup{fresh}, fromPolicy: true},
		{name: "retry attempt", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			f := claimOnce(t, c, id)
			if _, err := c.FailExecution(ctx, &valkey.FailExecutionParams{ExecutionID: id, Fence: f, FailureReason: "boom",
				FailureCategory: "transient", RetryPolicyJSON: `{"max_retries":3,"backoff":{"type":"fixed","delay_ms":0}}`}); err != nil {
				t.Fatal(err)
			}
			promote(t, c, id)
		}}},
		{name: "replay attempt", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			f := claimOnce(t, c, id)
			if err := c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: id, Fence: f, Result: "r"}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ReplayExecution(ctx, id, 0); err != nil {
				t.Fatal(err)
			}
		}}},
		{name: "interrupted attempt", wantCode: "use_claim_resumed_execution", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			f := claimOnce(t, c, id)
			now, _ := c.ServerTime(ctx)
			if err := c.DelayExecution(ctx, &valkey.DelayExecutionParams{ExecutionID: id, Fence: f, DelayUntil: now}); err != nil {
				t.Fatal(err)
			}
			promote(t, c, id)
		}}},
		{name: "capability mismatch", wantCode: "capability_mismatch", caps: []string{"cpu"},
			setup: []setup{create(`{"routing_requirements":{"required_capabilities":["gpu","arm"]}}`, 0)}},
		{name: "capabilities met", caps: []string{"arm", "cpu", "gpu"},
			setup: []setup{create(`{"routing_requirements":{"required_capabilities":["gpu","arm"]}}`, 0)}},
		{name: "too many worker capabilities", wantCode: "invalid_capabilities", caps: manyCaps(257), setup: []setup{fresh}},
		{name: "missing execution", wantCode: "execution_not_found"},
		{name: "delayed execution", wantCode: "execution_not_eligible", setup: []setup{create(policy, 4102444800000)}},
		{name: "grant held by another worker", wantCode: "grant_already_exists", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			if err := c.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: "w9", WorkerInstanceID: "w9-i",
				Lane: lane, GrantTTLMs: 60000}); err != nil {
				t.Fatal(err)
			}
		}}},
		{name: "not in the eligible set", wantCode: "execution_not_in_eligible_set", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			raw := c.Raw()
			if err := raw.Do(ctx, raw.B().Zrem().Key(model.KeysOn(id.Partition()).LaneEligible(lane)).Member(string(id)).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}}},
		{name: "owned yet eligible", wantCode: "lease_conflict", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			raw := c.Raw()
			if err := raw.Do(ctx, raw.B().Hset().Key(model.KeysFor(id).Core()).FieldValue().FieldValue("ownership_state", "leased").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}}},
		// The one call skips the DEL of lease_current only when neither it
		// nor a grant exists; a stale one must go as the two calls drop it.
		{name: "stale lease_current", setup: []setup{fresh, func(t *testing.T, c *valkey.Client, id model.ExecutionID) {
			raw := c.Raw()
			if err := raw.Do(ctx, raw.B().Hset().Key(model.KeysFor(id).LeaseCurrent()).FieldValue().
				FieldValue("stray", "x").FieldValue("lease_id", "old").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}}},
		{name: "malformed attempt policy", wantCode: "invalid_policy_json", setup: []setup{fresh},
			edit: func(p *valkey.ClaimExecutionParams) { p.AttemptPolicyJSON = "{not json" }},
		{name: "non-numeric lease ttl", wantCode: "invalid_input", setup: []setup{fresh}, rawArg: [2]any{6, "soon"}},
		{name: "non-numeric attempt timeout", wantCode: "invalid_input", setup: []setup{fresh}, rawArg: [2]any{10, "1x"}},
		{name: "grant of no lifetime", wantCode: "invalid_claim_grant", setup: []setup{fresh}, grantTTL: -1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			two, one := valkeytest.Client(t), valkeytest.Client(t)
			id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i + 1)}, model.NewUUID())
			for _, s := range tc.setup {
				s(t, two, id)
			}
			copyKeyspace(t, ctx, two.Raw(), one.Raw())
			before := claimDump(t, ctx, one.Raw())
			if cmp := (&clockCmp{}); cmp.diff(before, claimDump(t, ctx, two.Raw())) != "" {
				t.Fatalf("copies differ before the calls")
			}
			claim := valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: worker, WorkerInstanceID: wiid, LaneID: lane,
				CapabilityHash: "h1", LeaseID: "lease-1", AttemptID: "attempt-1", LeaseTTLMs: 30000}
			if tc.edit != nil {
				tc.edit(&claim)
			}
			gttl := tc.grantTTL
			if gttl == 0 {
				gttl = 5000
			}
			// Two calls, one after the other.
			twoClaim := claim
			if tc.fromPolicy {
				twoClaim.AttemptTimeoutMs = 60000
			}
			grant := &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: worker, WorkerInstanceID: wiid, Lane: lane,
				CapabilityHash: "h1", GrantTTLMs: gttl, RouteSnapshotJSON: `{"r":1}`, AdmissionSummary: "adm", WorkerCapabilities: tc.caps}
			var twoRep []string
			if err := two.IssueClaimGrant(ctx, grant); err != nil {
				twoRep = replyTokens(nil, err)
			} else {
				call := twoClaim.Call()
				if tc.rawArg[1] != nil {
					call.Args[tc.rawArg[0].(int)] = tc.rawArg[1].(string)
				}
				twoRep = replyTokens(two.FCall(ctx, call.Function, call.Keys, call.Args))
			}
			// One call.
			p := &valkey.FabricClaimParams{Claim: claim, GrantTTLMs: gttl, RouteSnapshotJSON: `{"r":1}`, AdmissionSummary: "adm",
				WorkerCapabilities: tc.caps, AttemptTimeoutFromPolicy: tc.fromPolicy}
			call := p.Call()
			if tc.rawArg[1] != nil {
				call.Args[tc.rawArg[0].(int)] = tc.rawArg[1].(string)
			}
			// The one call runs on a later server clock than the two calls, so
			// that every timestamp it writes differs by the offset.
			t0, err := one.ServerTime(ctx)
			if err != nil {
				t.Fatal(err)
			}
			valkeytest.Eventually(t, 5*time.Second, "server clock moves on", func() bool {
				now, err := one.ServerTime(ctx)
				return err == nil && now >= t0+2
			})
			rep, err := one.FCall(ctx, call.Function, call.Keys, call.Args)
			oneRep := replyTokens(rep, err)

			if tc.wantCode == "" {
				if twoRep[0] != "ok" || oneRep[0] != "ok" {
					t.Fatalf("want success: two calls %q, one call %q", twoRep, oneRep)
				}
				res, err := valkey.ParseFabricClaim(rep)
				if err != nil {
					t.Fatal(err)
				}
				if res.Kind != "kind" || res.Namespace != "ns" || res.Lane != lane || string(res.Payload) != "in" || res.FlowID != "" {
					t.Fatalf("execution fields of the reply: %+v", res)
				}
				oneRep = oneRep[:8] // the claim's six fields
			} else if len(twoRep) < 2 || twoRep[1] != tc.wantCode {
				t.Fatalf("two calls answered %q, want %s", twoRep, tc.wantCode)
			}
			cmp := &clockCmp{}
			if d := cmp.diff([][]string{twoRep}, [][]string{oneRep}); d != "" {
				t.Fatalf("replies differ:%s", d)
			}
			after2, after1 := claimDump(t, ctx, two.Raw()), claimDump(t, ctx, one.Raw())
			if d := cmp.diff(after2, after1); d != "" {
				t.Fatalf("keyspaces differ:%s", d)
			}
			if tc.wantCode == "" && (&clockCmp{}).diff(before, after1) == "" {
				t.Fatal("a successful claim changed nothing")
			}
		})
	}
}

func manyCaps(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "c" + strconv.Itoa(i)
	}
	return out
}

// fabric_claim_execution with a missing KEYS entry or no ARGV refuses and
// writes nothing.
func TestFabricClaimRefusesMissingKeys(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 5}, model.NewUUID())
	if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "l",
		ExecutionKind: "k", CreatorIdentity: "test", Payload: "p"}); err != nil {
		t.Fatal(err)
	}
	p := &valkey.FabricClaimParams{Claim: valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi",
		LaneID: "l", LeaseTTLMs: 30000}, GrantTTLMs: 5000}
	call := p.Call()
	raw := c.Raw()
	before := keyspace(t, ctx, raw)
	for _, tc := range []struct {
		keys, args []string
	}{{call.Keys[:15], call.Args}, {nil, nil}, {call.Keys[:1], nil}, {call.Keys, nil}} {
		_, err := c.FCall(ctx, call.Function, tc.keys, tc.args)
		if valkey.CodeOf(err) != "invalid_input" {
			t.Fatalf("%d keys, %d args: got %v, want invalid_input", len(tc.keys), len(tc.args), err)
		}
		if after := keyspace(t, ctx, raw); !sameKeyspace(before, after) {
			t.Fatalf("%d keys, %d args wrote: %s", len(tc.keys), len(tc.args), diffKeys(before, after))
		}
	}
	// The full call claims.
	if _, err := c.ClaimWithGrant(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// fabric_claim_next leaves exactly the keyspace, and answers per head
// exactly what, fabric_claim_execution by id leaves and answers when
// called on the lane's eligible heads in score order until the wanted
// number is claimed: fresh heads, a head of missing capabilities, retry
// and interrupted attempts, a head of another partition, an empty lane.
func TestFabricClaimNextMatchesClaimByID(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 120*time.Second)
	const lane, worker, wiid = "l", "w1", "w1-i1"
	policy := `{"timeout_policy":{"attempt_timeout_ms":60000}}`
	type exec struct {
		prio  int
		pol   string
		state string // "", "retry", "interrupted"
	}
	type tc struct {
		name          string
		execs         []exec
		foreign       bool // an id of another partition at the head
		caps          []string
		claims, heads int
		wantClaims    int
	}
	cases := []tc{
		{name: "two of three fresh", execs: []exec{{prio: 1, pol: policy}, {prio: 5}, {prio: 3, pol: policy}}, claims: 2, heads: 4, wantClaims: 2},
		{name: "missing capabilities at the head", caps: []string{"cpu"}, claims: 1, heads: 3, wantClaims: 1,
			execs: []exec{{prio: 9, pol: `{"routing_requirements":{"required_capabilities":["gpu"]}}`}, {prio: 1, pol: policy}}},
		{name: "retry and interrupted attempts", claims: 3, heads: 3, wantClaims: 2,
			execs: []exec{{prio: 3, state: "retry"}, {prio: 2, state: "interrupted"}, {prio: 1, pol: policy}}},
		{name: "foreign member", foreign: true, claims: 1, heads: 2, wantClaims: 1, execs: []exec{{prio: 1}}},
		{name: "heads bound the search", claims: 1, heads: 1, wantClaims: 0,
			execs: []exec{{prio: 9, pol: `{"routing_requirements":{"required_capabilities":["gpu"]}}`}, {prio: 1}}},
		{name: "empty lane", claims: 2, heads: 2},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			two, one := valkeytest.Client(t), valkeytest.Client(t)
			part := model.Partition{Family: model.FamilyFlow, Index: uint16(100 + i)}
			pk := model.KeysOn(part)
			for _, e := range tc.execs {
				id := model.NewExecutionID(part, model.NewUUID())
				if _, err := two.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: lane,
					ExecutionKind: "kind", Priority: e.prio, CreatorIdentity: "test", Payload: "in-" + string(id), PolicyJSON: e.pol}); err != nil {
					t.Fatal(err)
				}
				if e.state == "" {
					continue
				}
				cr, err := two.ClaimWithGrant(ctx, &valkey.FabricClaimParams{Claim: valkey.ClaimExecutionParams{ExecutionID: id,
					WorkerID: "w0", WorkerInstanceID: "w0-i", LaneID: lane, LeaseTTLMs: 30000}, GrantTTLMs: 5000})
				if err != nil {
					t.Fatal(err)
				}
				now, _ := two.ServerTime(ctx)
				if e.state == "retry" {
					if _, err := two.FailExecution(ctx, &valkey.FailExecutionParams{ExecutionID: id, Fence: cr.Fence(), FailureReason: "boom",
						FailureCategory: "transient", RetryPolicyJSON: `{"max_retries":3,"backoff":{"type":"fixed","delay_ms":0}}`}); err != nil {
						t.Fatal(err)
					}
				} else if err := two.DelayExecution(ctx, &valkey.DelayExecutionParams{ExecutionID: id, Fence: cr.Fence(), DelayUntil: now}); err != nil {
					t.Fatal(err)
				}
				now, _ = two.ServerTime(ctx)
				if st, err := two.PromoteDelayed(ctx, &valkey.PromoteDelayedParams{ExecutionID: id, Lane: lane, NowMs: now}); err != nil || st != valkey.PromoteStatus("promoted") {
					t.Fatalf("promote: %v %v", st, err)
				}
			}
			if tc.foreign {
				other := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 999}, model.NewUUID())
				raw := two.Raw()
				if err := raw.Do(ctx, raw.B().Zadd().Key(pk.LaneEligible(lane)).ScoreMember().ScoreMember(-1e15, string(other)).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			copyKeyspace(t, ctx, two.Raw(), one.Raw())
			heads, err := two.Raw().Do(ctx, two.Raw().B().Zrange().Key(pk.LaneEligible(lane)).Min("0").Max(strconv.Itoa(tc.heads-1)).Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			p := &valkey.FabricClaimNextParams{Partition: part, Lane: lane, WorkerID: worker, WorkerInstanceID: wiid, CapabilityHash: "h1",
				LeaseTTLMs: 30000, GrantTTLMs: 5000, WorkerCapabilitiesCSV: valkey.CapabilityCSV(tc.caps), Claims: tc.claims, Heads: tc.heads}
			call := p.Call()

			// By id: each head in order, the n-th claim with the n-th ids.
			var twoReps [][]string
			got := 0
			tA, err := two.ServerTime(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range heads {
				if got >= tc.claims {
					break
				}
				id, err := model.ParseExecutionID(h)
				if err != nil || id.Partition() != part {
					continue
				}
				c := (&valkey.FabricClaimParams{Claim: valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: worker, WorkerInstanceID: wiid,
					LaneID: lane, CapabilityHash: "h1", LeaseID: p.LeaseIDs[got], AttemptID: p.AttemptIDs[got], LeaseTTLMs: 30000},
					GrantTTLMs: 5000, WorkerCapabilitiesCSV: p.WorkerCapabilitiesCSV, AttemptTimeoutFromPolicy: true}).Call()
				rep, err := two.FCall(ctx, c.Function, c.Keys, c.Args)
				if err == nil {
					got++
				}
				twoReps = append(twoReps, append([]string{h}, replyTokens(rep, err)...))
			}
			tB, err := two.ServerTime(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantClaims {
				t.Fatalf("by id claimed %d, want %d: %q", got, tc.wantClaims, twoReps)
			}

			t0, err := one.ServerTime(ctx)
			if err != nil {
				t.Fatal(err)
			}
			valkeytest.Eventually(t, 5*time.Second, "server clock moves on", func() bool {
				now, err := one.ServerTime(ctx)
				return err == nil && now >= t0+2
			})
			rep, err := one.FCall(ctx, call.Function, call.Keys, call.Args)
			if err != nil {
				t.Fatal(err)
			}
			items, err := valkey.ParseFabricClaimNext(rep)
			if err != nil {
				t.Fatal(err)
			}
			var oneReps [][]string
			claimed := 0
			var oneNow int64
			for _, it := range items {
				if it.Result != nil {
					claimed++
					oneNow = it.Result.ExpiresAt - 30000
					r := it.Result
					oneReps = append(oneReps, []string{string(it.ExecutionID), "ok", "OK", r.LeaseID, strconv.FormatUint(r.LeaseEpoch, 10),
						strconv.FormatInt(r.ExpiresAt, 10), r.AttemptID, strconv.Itoa(r.AttemptIndex), r.AttemptType,
						r.Kind, r.Namespace, r.FlowID, r.Lane, string(r.Payload)})
				} else {
					oneReps = append(oneReps, append([]string{string(it.ExecutionID)}, replyTokens(nil, it.Err)...))
				}
			}
			if claimed != tc.wantClaims {
				t.Fatalf("fabric_claim_next claimed %d, want %d: %q", claimed, tc.wantClaims, oneReps)
			}
			// Each head by id ran at its own clock reading, between tA and
			// tB; the one call at one reading (oneNow, known when it
			// claimed). Every timestamp differs by an offset in that range;
			// without a claim at most one head wrote one, so one offset.
			if len(twoReps) != len(oneReps) {
				t.Fatalf("heads tried: by id %q, one call %q", twoReps, oneReps)
			}
			cmp := &clockCmp{}
			if claimed > 0 {
				cmp.span = &[2]int64{oneNow - tB, oneNow - tA}
				if oneNow-tB <= 0 {
					t.Fatalf("the one call ran at %d, not after the calls by id (up to %d)", oneNow, tB)
				}
			}
			if d := cmp.diff(twoReps, oneReps); d != "" {
				t.Fatalf("replies differ:%s", d)
			}
			if d := cmp.diff(claimDump(t, ctx, two.Raw()), claimDump(t, ctx, one.Raw())); d != "" {
				t.Fatalf("keyspaces differ:%s", d)
			}
		})
	}
}

// fabric_claim_next with missing KEYS or ARGV, or bad counts, refuses and
// writes nothing.
func TestFabricClaimNextRefusesBadInput(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	part := model.Partition{Family: model.FamilyFlow, Index: 7}
	id := model.NewExecutionID(part, model.NewUUID())
	if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "l",
		ExecutionKind: "k", CreatorIdentity: "test", Payload: "p"}); err != nil {
		t.Fatal(err)
	}
	p := &valkey.FabricClaimNextParams{Partition: part, Lane: "l", WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 30000,
		GrantTTLMs: 5000, Claims: 2}
	call := p.Call()
	raw := c.Raw()
	before := keyspace(t, ctx, raw)
	badCount := slices.Clone(call.Args)
	badCount[8] = "0"
	fewHeads := slices.Clone(call.Args)
	fewHeads[9] = "1"
	for _, tc := range []struct {
		keys, args []string
	}{{call.Keys[:5], call.Args}, {nil, nil}, {call.Keys, nil}, {call.Keys, call.Args[:12]}, {call.Keys, badCount}, {call.Keys, fewHeads}} {
		_, err := c.FCall(ctx, call.Function, tc.keys, tc.args)
		if valkey.CodeOf(err) != "invalid_input" {
			t.Fatalf("%d keys, %d args: got %v, want invalid_input", len(tc.keys), len(tc.args), err)
		}
		if after := keyspace(t, ctx, raw); !sameKeyspace(before, after) {
			t.Fatalf("%d keys, %d args wrote: %s", len(tc.keys), len(tc.args), diffKeys(before, after))
		}
	}
	items, err := c.ClaimNext(ctx, p)
	if err != nil || len(items) != 1 || items[0].Result == nil || items[0].ExecutionID != id {
		t.Fatalf("full call: %+v %v", items, err)
	}
}
