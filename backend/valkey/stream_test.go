package valkey_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

func frameParams(eid model.ExecutionID, cl *valkey.ClaimResult, payload string) *valkey.AppendFrameParams {
	return &valkey.AppendFrameParams{ExecutionID: eid, AttemptIndex: cl.AttemptIndex, Fence: cl.Fence(),
		FrameType: "token", Payload: payload, RetentionMaxLen: valkey.DefaultRetentionMaxLen}
}

func (f *suspFix) appendFrame(p *valkey.AppendFrameParams) *valkey.AppendFrameResult {
	f.t.Helper()
	res, err := f.c.AppendFrame(f.ctx, p)
	if err != nil {
		f.t.Fatalf("AppendFrame: %v", err)
	}
	return res
}

func (f *suspFix) xlen(key string) int64 {
	f.t.Helper()
	n, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Xlen().Key(key).Build()).AsInt64()
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestAppendFrame(t *testing.T) {
	t.Parallel()

	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.claimed()
		p := frameParams(eid, cl, "hello")
		p.CorrelationID = "c1"
		res := f.appendFrame(p)
		if res.FrameCount != 1 || res.SummaryVersion != 0 || res.EntryID == "" {
			t.Fatalf("%+v", res)
		}
		k := model.KeysFor(eid)
		meta := f.hgetall(k.StreamMeta(0))
		suspWantFields(t, "meta", meta, map[string]string{"stream_id": string(eid) + ":0", "execution_id": string(eid),
			"attempt_id": cl.AttemptID, "attempt_index": "0", "closed_at": "", "closed_reason": "",
			"durability_mode": "durable_full", "retention_maxlen": "10000", "last_sequence": res.EntryID,
			"frame_count": "1", "total_bytes": "5", "has_durable_frame": "1", "last_frame_at": meta["created_at"]})
		entries := f.xrange(k.Stream(0))
		if len(entries) != 1 || len(entries[0]) != 7 {
			t.Fatalf("entries %v", entries)
		}
		suspWantFields(t, "frame", entries[0], map[string]string{"frame_type": "token", "ts": meta["created_at"],
			"payload": "hello", "encoding": "utf8", "source": "worker", "mode": "durable", "correlation_id": "c1"})
		p.TS, p.CorrelationID = 42, ""
		res = f.appendFrame(p)
		if res.FrameCount != 2 {
			t.Fatalf("%+v", res)
		}
		if e := f.xrange(k.Stream(0)); e[1]["ts"] != "42" || len(e[1]) != 6 {
			t.Errorf("second frame %v", e[1])
		}
		suspWantFields(t, "meta", f.hgetall(k.StreamMeta(0)), map[string]string{"total_bytes": "10", "frame_count": "2"})
	})

	t.Run("RetentionTrimsExactly", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.claimed()
		p := frameParams(eid, cl, "x")
		p.RetentionMaxLen = 2
		for i := 0; i < 4; i++ {
			f.appendFrame(p)
		}
		k := model.KeysFor(eid)
		if n := f.xlen(k.Stream(0)); n != 2 {
			t.Errorf("xlen %d", n)
		}
		suspWantFields(t, "meta", f.hgetall(k.StreamMeta(0)), map[string]string{"frame_count": "4"})
	})

	t.Run("PayloadLimit", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.claimed()
		_, err := f.c.AppendFrame(f.ctx, frameParams(eid, cl, strings.Repeat("x", valkey.DefaultMaxFramePayloadBytes+1)))
		suspWantCode(t, err, valkey.CodeRetentionLimitExceeded)
		p := frameParams(eid, cl, "12345")
		p.MaxPayloadBytes = 4
		_, err = f.c.AppendFrame(f.ctx, p)
		suspWantCode(t, err, valkey.CodeRetentionLimitExceeded)
		if f.exists(model.KeysFor(eid).StreamMeta(0)) {
			t.Error("meta created by a refused frame")
		}
		p.MaxPayloadBytes = 5
		f.appendFrame(p)
	})

	t.Run("Summary", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.claimed()
		k := model.KeysFor(eid)
		p := frameParams(eid, cl, `{"a":1,"b":{"c":"x","d":[1,2]},"e":"gone"}`)
		p.Mode, p.PatchKind = valkey.StreamModeSummary, valkey.PatchKindJSONMerge
		if res := f.appendFrame(p); res.SummaryVersion != 1 {
			t.Fatalf("%+v", res)
		}
		p.Payload = `{"b":{"c":"` + valkey.SummaryNullSentinel + `","d":[3]},"e":null,"f":"new"}`
		if res := f.appendFrame(p); res.SummaryVersion != 2 {
			t.Fatalf("%+v", res)
		}
		s, err := f.c.ReadSummary(f.ctx, eid, 0)
		if err != nil || s.Version != 2 || s.PatchKind != "json-merge-patch" || s.FirstAppliedMs == 0 || s.LastUpdatedMs < s.FirstAppliedMs {
			t.Fatalf("%+v %v", s, err)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(s.Document), &doc); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"a": 1.0, "b": map[string]any{"c": nil, "d": []any{3.0}}, "f": "new"}
		if !sameJSON(doc, want) {
			t.Errorf("document %s", s.Document)
		}
		e := f.xrange(k.Stream(0))
		suspWantFields(t, "summary frame", e[1], map[string]string{"mode": "summary", "summary_version": "2"})
	})

	t.Run("SummaryErrors", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.claimed()
		k := model.KeysFor(eid)
		deep := strings.Repeat(`{"a":`, 18) + "1" + strings.Repeat("}", 18)
		cases := []struct {
			name, payload, kind string
			detail              string
			tamper              func(c *valkey.Call)
		}{
			{"NotJSON", "{oops", "", "patch payload is not valid JSON", nil},
			{"NotObject", "[1,2]", "", "patch must be a JSON object", nil},
			{"Kind", "{}", "json-patch", "unsupported patch_kind", nil},
			{"Depth", deep, "", "patch_depth_exceeded", nil},
			{"NoSummaryKey", "{}", "", "summary mode requires stream_summary key", func(c *valkey.Call) { c.Keys = c.Keys[:3] }},
		}
		for _, tc := range cases {
			p := frameParams(eid, cl, tc.payload)
			p.Mode, p.PatchKind = valkey.StreamModeSummary, tc.kind
			call := p.Call()
			if tc.tamper != nil {
				tc.tamper(&call)
			}
			_, err := f.fcall(call)
			if le := suspWantCode(t, err, valkey.CodeInvalidInput); le.Detail(0) != tc.detail {
				t.Errorf("%s: detail %v", tc.name, le.Details)
			}
		}
		if f.exists(k.StreamSummary(0)) || f.exists(k.Stream(0)) {
			t.Error("refused summary frames wrote")
		}
		f.hset(k.StreamSummary(0), "document", "not json")
		p := frameParams(eid, cl, `{"a":1}`)
		p.Mode = valkey.StreamModeSummary
		_, err := f.c.AppendFrame(f.ctx, p)
		suspWantCode(t, err, valkey.CodeCorruption)
	})

	t.Run("BestEffortThenDurable", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.claimed()
		k := model.KeysFor(eid)
		p := frameParams(eid, cl, "live")
		p.Mode, p.TTLMs = valkey.StreamModeBestEffort, 30_000
		f.appendFrame(p)
		meta := f.hgetall(k.StreamMeta(0))
		// First append seeds the rate so that K is the floor (64).
		suspWantFields(t, "meta", meta, map[string]string{"has_durable_frame": "0", "maxlen_applied_last": "64",
			"ema_rate_hz": "1.0666666666667", "last_append_ts_ms": meta["created_at"]})
		if ttl := f.pttl(k.Stream(0)); ttl <= 59_000 || ttl > 60_000 {
			t.Errorf("stream ttl %d", ttl)
		}
		suspWantFields(t, "frame", f.xrange(k.Stream(0))[0], map[string]string{"mode": "best_effort", "ttl_ms": "30000"})
		f.appendFrame(frameParams(eid, cl, "durable"))
		if ttl := f.pttl(k.Stream(0)); ttl != -1 {
			t.Errorf("durable frame did not persist the stream: ttl %d", ttl)
		}
		f.appendFrame(p)
		if ttl := f.pttl(k.Stream(0)); ttl != -1 {
			t.Errorf("best-effort TTL applied after a durable frame: %d", ttl)
		}
		all, err := f.c.ReadAttemptStream(f.ctx, eid, 0, "", "", 100, "")
		if err != nil || len(all.Frames) != 3 {
			t.Fatalf("%+v %v", all, err)
		}
		dur, err := f.c.ReadAttemptStream(f.ctx, eid, 0, "-", "+", 100, valkey.VisibilityExcludeBestEffort)
		if err != nil || len(dur.Frames) != 1 || dur.Frames[0].Fields["payload"] != "durable" {
			t.Fatalf("%+v %v", dur, err)
		}
	})

	t.Run("OwnershipErrors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			code  valkey.ErrorCode
			setup func(f *suspFix, eid model.ExecutionID, c *valkey.Call)
		}{
			{"NotActive", valkey.CodeStreamClosed, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "suspended")
			}},
			{"NoExecution", valkey.CodeStreamClosed, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.del(model.KeysFor(eid).Core())
			}},
			{"Expired", valkey.CodeStaleOwnerCannotAppend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "ownership_state", "lease_expired_reclaimable")
			}},
			{"Revoked", valkey.CodeStaleOwnerCannotAppend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "ownership_state", "lease_revoked")
			}},
			{"LeaseLapsed", valkey.CodeStaleOwnerCannotAppend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lease_expires_at", "1")
			}},
			{"WrongAttempt", valkey.CodeStaleOwnerCannotAppend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[1] = "1"
			}},
			{"WrongLease", valkey.CodeStaleOwnerCannotAppend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[2] = "other"
			}},
			{"WrongEpoch", valkey.CodeStaleOwnerCannotAppend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[3] = "9"
			}},
			{"StreamClosed", valkey.CodeStreamClosed, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).StreamMeta(0), "closed_at", "5", "closed_reason", "lease_expired")
			}},
			{"NonNumericRetention", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[10] = "lots"
			}},
			{"NegativeRetention", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[10] = "-1"
			}},
			{"NonNumericMaxBytes", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[12] = "big"
			}},
			{"WrongArity", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args = c.Args[:4]
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setupSusp(t)
				eid, cl := f.claimed()
				call := frameParams(eid, cl, "p").Call()
				tc.setup(f, eid, &call)
				_, err := f.fcall(call)
				suspWantCode(t, err, tc.code)
				if f.exists(model.KeysFor(eid).Stream(0)) {
					t.Error("frame written on error")
				}
			})
		}
	})
}

func TestReadAttemptStream(t *testing.T) {
	t.Parallel()
	f := setupSusp(t)
	eid, cl := f.claimed()
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, f.appendFrame(frameParams(eid, cl, "f"+strconv.Itoa(i))).EntryID)
	}
	r, err := f.c.ReadAttemptStream(f.ctx, eid, 0, ids[1], "+", 1, "all")
	if err != nil || len(r.Frames) != 1 || r.Frames[0].ID != ids[1] || r.Frames[0].Fields["payload"] != "f1" ||
		r.ClosedAt != "" || r.ClosedReason != "" {
		t.Fatalf("%+v %v", r, err)
	}
	f.hset(model.KeysFor(eid).StreamMeta(0), "closed_at", "77", "closed_reason", "attempt_success")
	r, err = f.c.ReadAttemptStream(f.ctx, eid, 0, "", "", 10, "")
	if err != nil || len(r.Frames) != 3 || r.ClosedAt != "77" || r.ClosedReason != "attempt_success" {
		t.Fatalf("%+v %v", r, err)
	}
	// An absent stream reads empty.
	r, err = f.c.ReadAttemptStream(f.ctx, eid, 5, "", "", 10, "")
	if err != nil || len(r.Frames) != 0 || r.ClosedAt != "" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, tc := range []struct {
		count, detail string
	}{{"0", "count_limit must be >= 1"}, {"many", "count_limit must be >= 1"}, {"10001", "count_limit_exceeds_hard_cap"}} {
		call := valkey.ReadAttemptStreamCall(eid, 0, "", "", 1, "")
		call.Args[2] = tc.count
		_, err := f.fcall(call)
		if le := suspWantCode(t, err, valkey.CodeInvalidInput); le.Detail(0) != tc.detail {
			t.Errorf("count %s: %v", tc.count, le.Details)
		}
	}
	_, err = f.c.ReadAttemptStream(f.ctx, eid, 0, "bogus-id", "+", 10, "")
	suspWantCode(t, err, valkey.CodeInvalidInput)
}

func TestReadSummaryAbsent(t *testing.T) {
	t.Parallel()
	f := setupSusp(t)
	s, err := f.c.ReadSummary(f.ctx, f.eid(), 0)
	if err != nil || *s != (valkey.Summary{}) {
		t.Fatalf("%+v %v", s, err)
	}
	rep, err := f.c.FCall(f.ctx, "ff_read_summary", []string{model.KeysFor(f.eid()).StreamSummary(0)}, nil)
	if err != nil || strings.Join(rep.Fields, ",") != ",0,,0,0" {
		t.Fatalf("%+v %v", rep, err)
	}
}
