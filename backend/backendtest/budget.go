package backendtest

import (
	"context"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// budgetOperations are the backend.BudgetDriver operations the suite
// exercises (appended to Operations).
var budgetOperations = []string{"CreateBudget", "ReadBudget", "RecordSpend", "CreateQuota", "ReadQuota", "Admit",
	"ReleaseAdmission", "ReportProgress"}

func init() { Operations = append(Operations, budgetOperations...) }

// runBudget registers the BudgetDriver subtests.
func runBudget(sub func(name string, fn func(e *env))) {
	sub("CreateBudget+ReadBudget", testBudgetCreate)
	sub("CreateBudget/InvalidInput", testBudgetInvalid)
	sub("RecordSpend", testRecordSpend)
	sub("RecordSpend/InvalidInput", testRecordSpendInvalid)
	sub("CreateQuota+ReadQuota", testQuotaCreate)
	sub("Admit+ReleaseAdmission/Concurrency", testAdmitConcurrency)
	sub("Admit/Rate", testAdmitRate)
	sub("RecordSpend+Admit/Concurrent", testBudgetQuotaConcurrent)
	sub("ReportProgress", testReportProgress)
}

func (e *env) budget(interval int64, dims ...backend.BudgetDimension) model.UUID {
	e.t.Helper()
	id := model.NewUUID()
	r, err := e.d.CreateBudget(e.ctx, &backend.CreateBudgetParams{BudgetID: id, ScopeType: "tenant", ScopeID: "bt",
		EnforcementMode: "strict", OnHardLimit: "fail", OnSoftLimit: "warn", ResetIntervalMs: interval, Dimensions: dims})
	if err != nil {
		e.t.Fatalf("create budget: %v", err)
	}
	if r.AlreadyExisted || r.BudgetID != id.String() {
		e.t.Fatalf("create budget %s: %+v", id, r)
	}
	return id
}

func (e *env) readBudget(id model.UUID) *backend.BudgetStatus {
	e.t.Helper()
	st, err := e.d.ReadBudget(e.ctx, id)
	if err != nil {
		e.t.Fatalf("read budget %s: %v", id, err)
	}
	return st
}

func sameLimits(a, b []backend.BudgetDimension) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testBudgetCreate(e *env) {
	before := time.Now().UnixMilli()
	limits := []backend.BudgetDimension{{Name: "tokens", Hard: 1000, Soft: 500}, {Name: "usd_micros", Hard: 90}}
	id := e.budget(3_600_000, limits[1], limits[0])
	st := e.readBudget(id)
	if st.BudgetID != id || st.ScopeType != "tenant" || st.ScopeID != "bt" || len(st.Used) != 0 ||
		!sameLimits(st.Limits, limits) || st.BreachCount != 0 || st.SoftBreachCount != 0 ||
		st.NextResetAt < before+3_600_000 || st.NextResetAt > time.Now().UnixMilli()+3_600_000 {
		e.t.Fatalf("fresh budget: %+v", st)
	}
	r, err := e.d.CreateBudget(e.ctx, &backend.CreateBudgetParams{BudgetID: id,
		Dimensions: []backend.BudgetDimension{{Name: "tokens", Hard: 1}}})
	if err != nil || !r.AlreadyExisted {
		e.t.Fatalf("re-create: %+v %v, want AlreadyExisted", r, err)
	}
	if st := e.readBudget(id); !sameLimits(st.Limits, limits) {
		e.t.Fatalf("re-creating changed the limits: %+v", st.Limits)
	}
	once := e.budget(0, backend.BudgetDimension{Name: "calls", Hard: 3})
	if st := e.readBudget(once); st.NextResetAt != 0 {
		e.t.Fatalf("a budget without a reset interval resets at %d", st.NextResetAt)
	}
	_, err = e.d.ReadBudget(e.ctx, model.NewUUID())
	wantErr(e.t, "read an unknown budget", err, backend.ErrNotFound)
	_, err = e.d.ReadBudget(e.ctx, model.UUID{})
	wantErr(e.t, "read a budget without id", err, backend.ErrInvalidInput)
}

func testBudgetInvalid(e *env) {
	for name, dims := range map[string][]backend.BudgetDimension{
		"NoDimensions": nil,
		"EmptyName":    {{Name: "", Hard: 1}},
		"Colon":        {{Name: "a:b", Hard: 1}},
		"Twice":        {{Name: "t", Hard: 1}, {Name: "t", Hard: 2}},
		"Negative":     {{Name: "t", Hard: -1}},
		"SoftOverHard": {{Name: "t", Hard: 1, Soft: 2}},
	} {
		id := model.NewUUID()
		_, err := e.d.CreateBudget(e.ctx, &backend.CreateBudgetParams{BudgetID: id, Dimensions: dims})
		wantErr(e.t, "create budget "+name, err, backend.ErrInvalidInput)
		_, err = e.d.ReadBudget(e.ctx, id)
		wantErr(e.t, "read the refused budget "+name, err, backend.ErrNotFound)
	}
	id := model.NewUUID()
	_, err := e.d.CreateBudget(e.ctx, &backend.CreateBudgetParams{BudgetID: id, ResetIntervalMs: -1,
		Dimensions: []backend.BudgetDimension{{Name: "t", Hard: 1}}})
	wantErr(e.t, "create budget with a negative reset interval", err, backend.ErrInvalidInput)
	_, err = e.d.ReadBudget(e.ctx, id)
	wantErr(e.t, "read the refused budget", err, backend.ErrNotFound)
	_, err = e.d.CreateBudget(e.ctx, &backend.CreateBudgetParams{Dimensions: []backend.BudgetDimension{{Name: "t", Hard: 1}}})
	wantErr(e.t, "create budget without id", err, backend.ErrInvalidInput)
}

func (e *env) spend(id model.UUID, exec model.ExecutionID, dedup string, deltas ...backend.UsageDelta) *backend.UsageResult {
	e.t.Helper()
	r, err := e.d.RecordSpend(e.ctx, &backend.ReportUsageParams{BudgetID: id, Deltas: deltas, DedupID: dedup, ExecutionID: exec})
	if err != nil {
		e.t.Fatalf("record spend %v on %s: %v", deltas, id, err)
	}
	return r
}

func testRecordSpend(e *env) {
	id := e.budget(0, backend.BudgetDimension{Name: "tokens", Hard: 1000, Soft: 500},
		backend.BudgetDimension{Name: "usd", Hard: 90}, backend.BudgetDimension{Name: "free"})
	exec := e.create(e.spec())
	dedup := string(exec) + ":step"
	steps := []struct {
		dedup  string
		deltas []backend.UsageDelta
		want   backend.UsageResult
	}{
		{dedup + "1", []backend.UsageDelta{{Dimension: "tokens", Delta: 400}, {Dimension: "usd", Delta: 40}},
			backend.UsageResult{Status: backend.BudgetOK}},
		{dedup + "2", []backend.UsageDelta{{Dimension: "tokens", Delta: 200}},
			backend.UsageResult{Status: backend.BudgetSoftBreach, Dimension: "tokens", Current: "600", Limit: "500"}},
		{dedup + "2", []backend.UsageDelta{{Dimension: "tokens", Delta: 200}},
			backend.UsageResult{Status: backend.BudgetAlreadyApplied}},
		// usd would pass its hard limit: nothing is added, tokens neither.
		{dedup + "3", []backend.UsageDelta{{Dimension: "tokens", Delta: 1}, {Dimension: "usd", Delta: 51}},
			backend.UsageResult{Status: backend.BudgetHardBreach, Dimension: "usd", Current: "40", Limit: "90"}},
		// Exactly at the hard limit is allowed; a limit of 0 is none.
		{"", []backend.UsageDelta{{Dimension: "usd", Delta: 50}, {Dimension: "free", Delta: 1_000_000}},
			backend.UsageResult{Status: backend.BudgetOK}},
	}
	for i, s := range steps {
		if r := e.spend(id, exec, s.dedup, s.deltas...); *r != s.want {
			e.t.Fatalf("step %d: %+v, want %+v", i, r, s.want)
		}
	}
	st := e.readBudget(id)
	if len(st.Used) != 3 || st.Used["tokens"] != 600 || st.Used["usd"] != 90 || st.Used["free"] != 1_000_000 ||
		st.BreachCount != 1 || st.SoftBreachCount != 1 {
		e.t.Fatalf("after the reports: %+v", st)
	}
	// A spend attributed to no execution.
	if r := e.spend(id, "", "", backend.UsageDelta{Dimension: "free", Delta: 1}); r.Status != backend.BudgetOK {
		e.t.Fatalf("unattributed spend: %+v", r)
	}
	_, err := e.d.RecordSpend(e.ctx, &backend.ReportUsageParams{BudgetID: model.NewUUID(),
		Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: 1}}})
	wantErr(e.t, "spend on an unknown budget", err, backend.ErrNotFound)
}

func testRecordSpendInvalid(e *env) {
	id := e.budget(0, backend.BudgetDimension{Name: "tokens", Hard: 100})
	e.spend(id, "", "", backend.UsageDelta{Dimension: "tokens", Delta: 7})
	for name, p := range map[string]backend.ReportUsageParams{
		"NoDeltas":    {BudgetID: id},
		"EmptyName":   {BudgetID: id, Deltas: []backend.UsageDelta{{Dimension: "", Delta: 1}}},
		"Negative":    {BudgetID: id, Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: 1}, {Dimension: "x", Delta: -1}}},
		"Twice":       {BudgetID: id, Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: 1}, {Dimension: "tokens", Delta: 1}}},
		"BadExecID":   {BudgetID: id, Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: 1}}, ExecutionID: "not-an-id"},
		"NoBudgetID":  {Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: 1}}},
		"ColonInName": {BudgetID: id, Deltas: []backend.UsageDelta{{Dimension: "a:b", Delta: 1}}},
	} {
		_, err := e.d.RecordSpend(e.ctx, &p)
		wantErr(e.t, "spend "+name, err, backend.ErrInvalidInput)
	}
	if st := e.readBudget(id); len(st.Used) != 1 || st.Used["tokens"] != 7 || st.BreachCount != 0 {
		e.t.Fatalf("refused reports wrote: %+v", st)
	}
}

func (e *env) quota(window, rate, conc int64) model.UUID {
	e.t.Helper()
	id := model.NewUUID()
	existed, err := e.d.CreateQuota(e.ctx, &backend.CreateQuotaPolicyParams{QuotaID: id, WindowSeconds: window,
		MaxRequestsPerWindow: rate, MaxConcurrent: conc})
	if err != nil || existed {
		e.t.Fatalf("create quota: existed %v, %v", existed, err)
	}
	return id
}

func (e *env) readQuota(id model.UUID, now int64) *backend.QuotaStatus {
	e.t.Helper()
	st, err := e.d.ReadQuota(e.ctx, &backend.ReadQuotaParams{QuotaID: id, NowMs: now})
	if err != nil {
		e.t.Fatalf("read quota %s: %v", id, err)
	}
	return st
}

func (e *env) admit(q model.UUID, id model.ExecutionID, now int64) *backend.AdmissionResult {
	e.t.Helper()
	r, err := e.d.Admit(e.ctx, &backend.AdmitParams{QuotaID: q, ExecutionID: id, NowMs: now})
	if err != nil {
		e.t.Fatalf("admit %s on %s: %v", id, q, err)
	}
	return r
}

func testQuotaCreate(e *env) {
	id := e.quota(60, 10, 2)
	st := e.readQuota(id, 0)
	if *st != (backend.QuotaStatus{QuotaID: id, WindowSeconds: 60, MaxRequestsPerWindow: 10, MaxConcurrent: 2}) {
		e.t.Fatalf("fresh quota: %+v", st)
	}
	existed, err := e.d.CreateQuota(e.ctx, &backend.CreateQuotaPolicyParams{QuotaID: id, WindowSeconds: 1, MaxConcurrent: 1})
	if err != nil || !existed {
		e.t.Fatalf("re-create: existed %v, %v", existed, err)
	}
	if st := e.readQuota(id, 0); st.WindowSeconds != 60 || st.MaxConcurrent != 2 {
		e.t.Fatalf("re-creating changed the quota: %+v", st)
	}
	for name, p := range map[string]backend.CreateQuotaPolicyParams{
		"NoWindow":      {QuotaID: model.NewUUID(), MaxConcurrent: 1},
		"NoLimits":      {QuotaID: model.NewUUID(), WindowSeconds: 1},
		"NegativeLimit": {QuotaID: model.NewUUID(), WindowSeconds: 1, MaxRequestsPerWindow: -1, MaxConcurrent: 1},
	} {
		_, err := e.d.CreateQuota(e.ctx, &p)
		wantErr(e.t, "create quota "+name, err, backend.ErrInvalidInput)
		_, err = e.d.ReadQuota(e.ctx, &backend.ReadQuotaParams{QuotaID: p.QuotaID})
		wantErr(e.t, "read the refused quota "+name, err, backend.ErrNotFound)
	}
	_, err = e.d.CreateQuota(e.ctx, &backend.CreateQuotaPolicyParams{WindowSeconds: 1, MaxConcurrent: 1})
	wantErr(e.t, "create quota without id", err, backend.ErrInvalidInput)
	_, err = e.d.ReadQuota(e.ctx, &backend.ReadQuotaParams{})
	wantErr(e.t, "read a quota without id", err, backend.ErrInvalidInput)
}

func testAdmitConcurrency(e *env) {
	q := e.quota(60, 0, 1)
	a, b := e.create(e.spec()), e.create(e.spec())
	now := time.Now().UnixMilli()
	if r := e.admit(q, a, now); r.Status != backend.AdmissionAdmitted {
		e.t.Fatalf("first admission: %+v", r)
	}
	if r := e.admit(q, a, now+1); r.Status != backend.AdmissionAlreadyAdmitted {
		e.t.Fatalf("repeat by the holder: %+v", r)
	}
	if r := e.admit(q, b, now+2); r.Status != backend.AdmissionConcurrencyExceeded {
		e.t.Fatalf("second execution: %+v", r)
	}
	if st := e.readQuota(q, now+3); st.Concurrent != 1 || st.InWindow != 1 {
		e.t.Fatalf("while held: %+v", st)
	}
	if err := e.d.ReleaseAdmission(e.ctx, &backend.ReleaseAdmissionParams{QuotaID: q, ExecutionID: a}); err != nil {
		e.t.Fatal(err)
	}
	if st := e.readQuota(q, now+4); st.Concurrent != 0 {
		e.t.Fatalf("after release: %+v", st)
	}
	if r := e.admit(q, b, now+5); r.Status != backend.AdmissionAdmitted {
		e.t.Fatalf("after release: %+v", r)
	}
	// Releasing on a quota that does not exist changes nothing.
	if err := e.d.ReleaseAdmission(e.ctx, &backend.ReleaseAdmissionParams{QuotaID: model.NewUUID(), ExecutionID: a}); err != nil {
		e.t.Fatalf("release on an unknown quota: %v", err)
	}
	_, err := e.d.Admit(e.ctx, &backend.AdmitParams{QuotaID: model.NewUUID(), ExecutionID: a, NowMs: now})
	wantErr(e.t, "admit on an unknown quota", err, backend.ErrNotFound)
	_, err = e.d.Admit(e.ctx, &backend.AdmitParams{QuotaID: q, ExecutionID: "not-an-id", NowMs: now})
	wantErr(e.t, "admit a malformed id", err, backend.ErrInvalidInput)
	err = e.d.ReleaseAdmission(e.ctx, &backend.ReleaseAdmissionParams{QuotaID: q, ExecutionID: "not-an-id"})
	wantErr(e.t, "release a malformed id", err, backend.ErrInvalidInput)
	if st := e.readQuota(q, now+6); st.Concurrent != 1 || st.InWindow != 2 {
		e.t.Fatalf("refused calls wrote: %+v", st)
	}
}

func testAdmitRate(e *env) {
	const windowMs = 3_600_000
	q := e.quota(windowMs/1000, 2, 0)
	ids := []model.ExecutionID{e.create(e.spec()), e.create(e.spec()), e.create(e.spec())}
	now := time.Now().UnixMilli()
	for i := range 2 {
		if r := e.admit(q, ids[i], now+int64(i)*1000); r.Status != backend.AdmissionAdmitted {
			e.t.Fatalf("admission %d: %+v", i, r)
		}
	}
	if r := e.admit(q, ids[2], now+2000); *r != (backend.AdmissionResult{Status: backend.AdmissionRateExceeded,
		RetryAfterMs: windowMs - 2000}) {
		e.t.Fatalf("third in the window: %+v, want retry after %d ms", r, windowMs-2000)
	}
	if st := e.readQuota(q, now+2000); st.InWindow != 2 || st.Concurrent != 0 {
		e.t.Fatalf("full window: %+v", st)
	}
	// Past the first admission's window: one slot frees.
	if st := e.readQuota(q, now+windowMs+500); st.InWindow != 1 {
		e.t.Fatalf("window moved past the first: %+v", st)
	}
	if r := e.admit(q, ids[2], now+windowMs+1); r.Status != backend.AdmissionAdmitted {
		e.t.Fatalf("after the window moved: %+v", r)
	}
}

func testReportProgress(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	p := &backend.ReportProgressParams{ExecutionID: c.ExecutionID, Fence: c.Fence, Pct: 42.5, Message: "chunk 17 of 40"}
	if err := e.d.ReportProgress(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
	f := e.state(c.ExecutionID).Fields
	if f["progress_pct"] != "42.5" || f["progress_message"] != "chunk 17 of 40" || f["progress_updated_at"] == "" {
		e.t.Fatalf("progress fields: %v", f)
	}
	// Without a message the last one stays.
	if err := e.d.ReportProgress(e.ctx, &backend.ReportProgressParams{ExecutionID: c.ExecutionID, Fence: c.Fence, Pct: 50}); err != nil {
		e.t.Fatal(err)
	}
	if f := e.state(c.ExecutionID).Fields; f["progress_pct"] != "50" || f["progress_message"] != "chunk 17 of 40" {
		e.t.Fatalf("progress fields: %v", f)
	}
	for name, bad := range map[string]backend.ReportProgressParams{
		"Negative":  {ExecutionID: c.ExecutionID, Fence: c.Fence, Pct: -1},
		"Over100":   {ExecutionID: c.ExecutionID, Fence: c.Fence, Pct: 100.5},
		"LongMsg":   {ExecutionID: c.ExecutionID, Fence: c.Fence, Pct: 1, Message: string(make([]byte, backend.ProgressMessageMaxBytes+1))},
		"BadExecID": {ExecutionID: "not-an-id", Fence: c.Fence, Pct: 1},
	} {
		wantErr(e.t, "progress "+name, e.d.ReportProgress(e.ctx, &bad), backend.ErrInvalidInput)
	}
	wantErr(e.t, "progress with a stale fence", e.d.ReportProgress(e.ctx, &backend.ReportProgressParams{
		ExecutionID: c.ExecutionID, Fence: stale(c.Fence), Pct: 60}), backend.ErrLeaseGone)
	if f := e.state(c.ExecutionID).Fields; f["progress_pct"] != "50" {
		e.t.Fatalf("refused reports wrote: %v", f)
	}
	e.complete(c, nil)
	wantErr(e.t, "progress after completion", e.d.ReportProgress(e.ctx, p), backend.ErrLeaseGone)
}

// budgetUnmigrated are RunUnmigrated's calls of the BudgetDriver
// operations, each with valid input.
func budgetUnmigrated(ctx context.Context, d backend.Driver, id model.ExecutionID, f backend.Fence) map[string]func() error {
	b, q := model.NewUUID(), model.NewUUID()
	dims := []backend.BudgetDimension{{Name: "t", Hard: 1}}
	return map[string]func() error{
		"CreateBudget": func() error {
			_, err := d.CreateBudget(ctx, &backend.CreateBudgetParams{BudgetID: b, Dimensions: dims})
			return err
		},
		"ReadBudget": func() error { _, err := d.ReadBudget(ctx, b); return err },
		"RecordSpend": func() error {
			_, err := d.RecordSpend(ctx, &backend.ReportUsageParams{BudgetID: b, Deltas: []backend.UsageDelta{{Dimension: "t", Delta: 1}}})
			return err
		},
		"CreateQuota": func() error {
			_, err := d.CreateQuota(ctx, &backend.CreateQuotaPolicyParams{QuotaID: q, WindowSeconds: 1, MaxConcurrent: 1})
			return err
		},
		"ReadQuota": func() error { _, err := d.ReadQuota(ctx, &backend.ReadQuotaParams{QuotaID: q}); return err },
		"Admit": func() error {
			_, err := d.Admit(ctx, &backend.AdmitParams{QuotaID: q, ExecutionID: id})
			return err
		},
		"ReleaseAdmission": func() error {
			return d.ReleaseAdmission(ctx, &backend.ReleaseAdmissionParams{QuotaID: q, ExecutionID: id})
		},
		"ReportProgress": func() error {
			return d.ReportProgress(ctx, &backend.ReportProgressParams{ExecutionID: id, Fence: f, Pct: 1})
		},
	}
}

// testBudgetQuotaConcurrent: reports and admissions racing on one budget
// and one quota never pass a limit: of 20 spends of 10 against a hard
// limit of 100 exactly 10 are added, of 10 executions admitted at once
// under a concurrency cap of 3 exactly 3 are.
func testBudgetQuotaConcurrent(e *env) {
	b := e.budget(0, backend.BudgetDimension{Name: "tokens", Hard: 100})
	q := e.quota(60, 0, 3)
	ids := make([]model.ExecutionID, 10)
	for i := range ids {
		ids[i] = e.create(e.spec())
	}
	now := time.Now().UnixMilli()
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		spent, admitted int
		errs            []error
	)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.d.RecordSpend(e.ctx, &backend.ReportUsageParams{BudgetID: b,
				Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: 10}}, ExecutionID: ids[i%len(ids)]})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if r.Status == backend.BudgetOK {
				spent++
			}
		}()
	}
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.d.Admit(e.ctx, &backend.AdmitParams{QuotaID: q, ExecutionID: id, NowMs: now})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if r.Status == backend.AdmissionAdmitted {
				admitted++
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		e.t.Fatalf("concurrent calls failed: %v", errs)
	}
	if st := e.readBudget(b); spent != 10 || st.Used["tokens"] != 100 || st.BreachCount != 10 {
		e.t.Fatalf("%d spends added, budget %+v; want 10, usage 100 and 10 breaches", spent, st)
	}
	if st := e.readQuota(q, now); admitted != 3 || st.Concurrent != 3 || st.InWindow != 3 {
		e.t.Fatalf("%d admitted, quota %+v; want 3", admitted, st)
	}
}
