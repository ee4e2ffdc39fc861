package valkey_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

func TestCreateQuotaPolicy(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id := model.NewUUID()
	k := model.QuotaKeysFor(c.Partitions().QuotaPartition(id), id)
	p := &valkey.CreateQuotaPolicyParams{QuotaID: id, WindowSeconds: 60, MaxRequestsPerWindow: 10, MaxConcurrent: 2, NowMs: famNow}
	existed, err := c.CreateQuotaPolicy(ctx, p)
	if err != nil || existed {
		t.Fatalf("CreateQuotaPolicy = %v, %v", existed, err)
	}
	famWantFields(t, c, k.Definition(), map[string]string{
		"quota_policy_id": id.String(), "requests_per_window_seconds": "60", "max_requests_per_window": "10",
		"active_concurrency_cap": "2", "created_at": "1700000000000"})
	if n := len(famHash(t, c, k.Definition())); n != 5 {
		t.Errorf("def has %d fields", n)
	}
	if famGet(t, c, k.Concurrency()) != "0" || !famIsMember(t, c, k.Policies(), id.String()) {
		t.Fatal("concurrency counter / policies index not initialised")
	}
	if famExists(t, c, k.Window("requests_per_window")) || famExists(t, c, k.AdmittedSet()) {
		t.Fatal("window / admitted_set created")
	}

	// Idempotent; unlike budgets the index SADD comes after the guard.
	famHSet(t, c, k.Definition(), "x", "y")
	c.Raw().Do(ctx, c.Raw().B().Del().Key(k.Policies()).Build())
	c.Raw().Do(ctx, c.Raw().B().Set().Key(k.Concurrency()).Value("5").Build())
	keys := []string{k.Definition(), k.Window("requests_per_window"), k.Concurrency(), k.AdmittedSet(), k.Policies()}
	famWantRaw(t, c, "ff_create_quota_policy", keys,
		[]string{id.String(), "1", "1", "1", "1"}, int64(1), "ALREADY_SATISFIED", id.String())
	if famExists(t, c, k.Policies()) || famGet(t, c, k.Concurrency()) != "5" {
		t.Fatal("ALREADY_SATISFIED path wrote")
	}

	other := model.NewUUID()
	ok := model.QuotaKeysFor(c.Partitions().QuotaPartition(other), other)
	if _, err := c.FCall(ctx, "ff_create_quota_policy", []string{ok.Definition(), "w", ok.Concurrency(), "a", ok.Policies()},
		[]string{other.String(), "60"}); !famCodeIs(err, valkey.CodeInvalidInput) {
		t.Fatalf("short ARGV: %v", err)
	}
}

func TestCheckAdmission(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id := model.NewUUID()
	k := model.QuotaKeysFor(c.Partitions().QuotaPartition(id), id)
	if _, err := c.CreateQuotaPolicy(ctx, &valkey.CreateQuotaPolicyParams{QuotaID: id, WindowSeconds: 10, MaxRequestsPerWindow: 2, NowMs: famNow}); err != nil {
		t.Fatal(err)
	}
	eids := make([]model.ExecutionID, 4)
	for i := range eids {
		eids[i] = c.Partitions().NewSoloExecutionID("default")
	}
	admit := func(e model.ExecutionID, now, rate, cap int64) *valkey.AdmissionResult {
		t.Helper()
		r, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: id, NowMs: now, WindowSeconds: 10,
			RateLimit: rate, ConcurrencyCap: cap, ExecutionID: e})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	win := k.Window(valkey.QuotaWindowDefault)

	// Sliding window: two admissions at t=0 and t=3s fill the window.
	if r := admit(eids[0], famNow, 2, 0); r.Status != valkey.AdmissionAdmitted {
		t.Fatalf("admit 0 = %+v", r)
	}
	if s, ok := famScore(t, c, win, string(eids[0])); !ok || s != float64(famNow) {
		t.Fatalf("window score = %v %v", s, ok)
	}
	if famGet(t, c, k.Admitted(eids[0])) != "1" {
		t.Fatal("guard not set")
	}
	if ttl := famPTTL(t, c, k.Admitted(eids[0])); ttl <= 9000 || ttl > 10000 {
		t.Fatalf("guard PTTL = %d", ttl)
	}
	if !famIsMember(t, c, k.AdmittedSet(), string(eids[0])) {
		t.Fatal("not in admitted_set")
	}
	if famGet(t, c, k.Concurrency()) != "0" {
		t.Fatal("concurrency incremented without a cap")
	}
	// Same execution again: ALREADY_ADMITTED, nothing recorded.
	if r := admit(eids[0], famNow+1, 2, 0); r.Status != valkey.AdmissionAlreadyAdmitted {
		t.Fatalf("re-admit = %+v", r)
	}
	if r := admit(eids[1], famNow+3000, 2, 0); r.Status != valkey.AdmissionAdmitted {
		t.Fatalf("admit 1 = %+v", r)
	}
	// Window full: retry after the oldest entry leaves (0 + 10s − 4s).
	r := admit(eids[2], famNow+4000, 2, 0)
	if *r != (valkey.AdmissionResult{Status: valkey.AdmissionRateExceeded, RetryAfterMs: 6000}) {
		t.Fatalf("rate exceeded = %+v", r)
	}
	if famExists(t, c, k.Admitted(eids[2])) || famIsMember(t, c, k.AdmittedSet(), string(eids[2])) {
		t.Fatal("refused admission recorded")
	}
	famWantRaw(t, c, "ff_check_admission_and_record",
		[]string{win, k.Concurrency(), k.Definition(), k.Admitted(eids[2]), k.AdmittedSet()},
		[]string{strconv.FormatInt(famNow+4000, 10), "10", "2", "0", string(eids[2]), "0"}, "RATE_EXCEEDED", "6000")
	// Jitter adds at most jitter_ms.
	rj, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: id, NowMs: famNow + 4000, WindowSeconds: 10,
		RateLimit: 2, ExecutionID: eids[2], JitterMs: 50})
	if err != nil || rj.Status != valkey.AdmissionRateExceeded || rj.RetryAfterMs < 6000 || rj.RetryAfterMs > 6050 {
		t.Fatalf("jittered = %+v, %v", rj, err)
	}
	// At exactly oldest + window the oldest entry is trimmed (inclusive).
	if r := admit(eids[2], famNow+10000, 2, 0); r.Status != valkey.AdmissionAdmitted {
		t.Fatalf("after slide = %+v", r)
	}
	if _, ok := famScore(t, c, win, string(eids[0])); ok {
		t.Fatal("expired window entry not trimmed")
	}

	// Concurrency cap: counter checked, incremented on admission, never
	// decremented except by ReleaseAdmission.
	q2 := model.NewUUID()
	k2 := model.QuotaKeysFor(c.Partitions().QuotaPartition(q2), q2)
	if _, err := c.CreateQuotaPolicy(ctx, &valkey.CreateQuotaPolicyParams{QuotaID: q2, WindowSeconds: 60, MaxConcurrent: 1, NowMs: famNow}); err != nil {
		t.Fatal(err)
	}
	r1, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: q2, NowMs: famNow, WindowSeconds: 60, ConcurrencyCap: 1, ExecutionID: eids[0]})
	if err != nil || r1.Status != valkey.AdmissionAdmitted || famGet(t, c, k2.Concurrency()) != "1" {
		t.Fatalf("cap admit = %+v, %v, counter %s", r1, err, famGet(t, c, k2.Concurrency()))
	}
	r2, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: q2, NowMs: famNow + 1, WindowSeconds: 60, ConcurrencyCap: 1, ExecutionID: eids[1]})
	if err != nil || *r2 != (valkey.AdmissionResult{Status: valkey.AdmissionConcurrencyExceeded}) {
		t.Fatalf("cap exceeded = %+v, %v", r2, err)
	}
	if err := c.ReleaseAdmission(ctx, q2, eids[0]); err != nil {
		t.Fatal(err)
	}
	if famGet(t, c, k2.Concurrency()) != "0" || famExists(t, c, k2.Admitted(eids[0])) || famIsMember(t, c, k2.AdmittedSet(), string(eids[0])) {
		t.Fatal("release did not undo the admission")
	}
	// The window entry stays (release does not touch the window).
	if _, ok := famScore(t, c, k2.Window(valkey.QuotaWindowDefault), string(eids[0])); !ok {
		t.Fatal("release removed the window entry")
	}
	// Release floors at 0.
	famWantRaw(t, c, "ff_release_admission", []string{k2.Admitted(eids[0]), k2.AdmittedSet(), k2.Concurrency()},
		[]string{string(eids[0])}, int64(1), "OK", "released")
	if famGet(t, c, k2.Concurrency()) != "0" {
		t.Fatal("concurrency went below 0")
	}
	// Window 0: no guard key (PX 0 is invalid), admission still recorded.
	r3, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: q2, NowMs: famNow, WindowSeconds: 0, ExecutionID: eids[3]})
	if err != nil || r3.Status != valkey.AdmissionAdmitted || famExists(t, c, k2.Admitted(eids[3])) {
		t.Fatalf("window 0 = %+v, %v", r3, err)
	}

	// Bad input: invalid_input {0, ...}, never a runtime error.
	keys := []string{win, k.Concurrency(), k.Definition(), k.Admitted(eids[3]), k.AdmittedSet()}
	for name, args := range map[string][]string{
		"now":     {"x", "10", "1", "0", string(eids[3]), "0"},
		"window":  {"1", "", "1", "0", string(eids[3]), "0"},
		"rate":    {"1", "10", "lots", "0", string(eids[3]), "0"},
		"cap":     {"1", "10", "1", "?", string(eids[3]), "0"},
		"jitter":  {"1", "10", "1", "0", string(eids[3]), "j"},
		"no_eid":  {"1", "10", "1", "0"},
		"nothing": {},
	} {
		got := famRaw(t, c, "ff_check_admission_and_record", keys, args)
		if len(got) < 2 || got[0] != int64(0) || got[1] != "invalid_input" {
			t.Errorf("%s: reply %#v", name, got)
		}
	}
	// Empty jitter means 0.
	famWantRaw(t, c, "ff_check_admission_and_record", keys,
		[]string{strconv.FormatInt(famNow+10001, 10), "10", "0", "0", string(eids[3]), ""}, "ADMITTED")
	if _, err := c.FCall(ctx, "ff_release_admission", []string{"a", "b", "c"}, nil); !famCodeIs(err, valkey.CodeInvalidInput) {
		t.Fatalf("release without eid: %v", err)
	}
}

// Admission refuses past the window limit, then admits again once the
// window slides.
func TestQuotaRefusesPastWindowLimit(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	id := model.NewUUID()
	if _, err := c.CreateQuotaPolicy(ctx, &valkey.CreateQuotaPolicyParams{QuotaID: id, WindowSeconds: 1, MaxRequestsPerWindow: 3, NowMs: famNow}); err != nil {
		t.Fatal(err)
	}
	var admitted, refused int
	for i := 0; i < 5; i++ {
		r, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: id, NowMs: famNow + int64(i)*100,
			WindowSeconds: 1, RateLimit: 3, ExecutionID: c.Partitions().NewSoloExecutionID("default")})
		if err != nil {
			t.Fatal(err)
		}
		switch r.Status {
		case valkey.AdmissionAdmitted:
			admitted++
		case valkey.AdmissionRateExceeded:
			refused++
			if want := int64(1000 - i*100); r.RetryAfterMs != want {
				t.Errorf("retry_after at %d = %d, want %d", i, r.RetryAfterMs, want)
			}
		}
	}
	if admitted != 3 || refused != 2 {
		t.Fatalf("admitted %d refused %d", admitted, refused)
	}
	r, err := c.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: id, NowMs: famNow + 1000,
		WindowSeconds: 1, RateLimit: 3, ExecutionID: c.Partitions().NewSoloExecutionID("default")})
	if err != nil || r.Status != valkey.AdmissionAdmitted {
		t.Fatalf("after slide = %+v, %v", r, err)
	}
}
