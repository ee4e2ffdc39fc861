package pdk_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

// dueTestScan is a lease_expiry-shaped DueScan: one index per partition,
// a pre-read of each member's core, a call unless the core says "done".
func dueTestScan(req abi.ScanRequest) pdk.DueScan {
	index := model.KeysOn(req.Partition).LeaseExpiry()
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		Pages:   3,
		PreRead: func(_, member string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(member)).Core(), Args: []string{"state"}}}
		},
		Call: func(d pdk.Due) []abi.Call {
			if pdk.FieldOr(d.Reads[0], 0, "") == "done" {
				return nil
			}
			return []abi.Call{{Function: "ff_mark_lease_expired_if_due",
				Keys: []string{model.KeysFor(model.ExecutionID(d.Member)).Core(), index}, Args: []string{d.Member}}}
		},
	}
}

var dueTestPlugin = pdk.Plugin{
	Manifest: pdk.Scanner("due_batch_test", 1000, 2,
		[]string{"ff_mark_lease_expired_if_due"}, []string{"ff:idx:*:lease_expiry", "ff:exec:*:core"}, nil),
	Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult { return dueTestScan(req).Run(h, req) },
	ScanBatch: func(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
		return pdk.DueBatch(h, req, dueTestScan)
	},
}

// dueTestData fills h: partition i of parts has i+1 due members and one
// not due yet; partition 1 also one "done" member and one malformed
// first (the batch size is 2: its first page acts on nothing, so its
// second page is read).
func dueTestData(h *pdktest.Host, parts []model.Partition) {
	h.NowMs = 10_000
	h.ConfigValues[pdk.ConfigNextDue] = "1"
	h.Handle("ff_mark_lease_expired_if_due", func(k, args []string) abi.CallResult {
		h.ZRem(k[1], args[0])
		return abi.CallResult{Result: abi.StatusOK, Status: "OK"}
	})
	for i, p := range parts {
		idx := model.KeysOn(p).LeaseExpiry()
		for j := range i + 1 {
			h.ZAdd(idx, float64(9_000+j), fmt.Sprintf("{fp:%d}:00000000-0000-4000-8000-00000000000%d", p.Index, j))
		}
		h.ZAdd(idx, float64(20_000+i), fmt.Sprintf("{fp:%d}:00000000-0000-4000-8000-000000000009", p.Index))
		if i == 1 {
			done := fmt.Sprintf("{fp:%d}:00000000-0000-4000-8000-000000000007", p.Index)
			h.ZAdd(idx, 8_000, done)
			h.HSet(model.KeysFor(model.ExecutionID(done)).Core(), "state", "done")
			h.ZAdd(idx, 8_500, "not-an-id")
		}
	}
}

// TestDueBatchMatchesRun: scanning partitions in one batch call gives each
// partition the result, and the FCALLs, of scanning it alone.
func TestDueBatchMatchesRun(t *testing.T) {
	t.Parallel()
	parts := []model.Partition{{Family: model.FamilyFlow, Index: 3}, {Family: model.FamilyFlow, Index: 7}, {Family: model.FamilyFlow, Index: 11}}
	alone := pdktest.New(t, dueTestPlugin.Manifest)
	dueTestData(alone, parts)
	var want []abi.ScanResult
	for _, p := range parts {
		want = append(want, alone.Scan(dueTestPlugin, p, 1))
	}
	batch := pdktest.New(t, dueTestPlugin.Manifest)
	dueTestData(batch, parts)
	got := batch.ScanBatch(dueTestPlugin, parts, 1)
	if !slices.Equal(got, want) {
		t.Fatalf("batch results %+v, want (scanned alone) %+v", got, want)
	}
	if want[1].Skipped != 2 || want[1].Acted != 2 || want[2].Acted != 2 || want[0].NextDueMs != 20_000 {
		t.Fatalf("fixture did not exercise skips, a second page and next due: %+v", want)
	}
	calls := func(cs []abi.Call) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Args[0])
		}
		slices.Sort(out)
		return out
	}
	if a, b := calls(alone.Calls), calls(batch.Calls); !slices.Equal(a, b) {
		t.Fatalf("batch FCALLs %q, want %q", b, a)
	}
	if len(batch.Denied) != 0 {
		t.Fatalf("batch refused: %v", batch.Denied)
	}
}

// roundTrips counts a Host's round trips.
type roundTrips struct {
	*pdktest.Host
	now, zrange, reads, fcalls int
}

func (r *roundTrips) Now() (int64, error) { r.now++; return r.Host.Now() }
func (r *roundTrips) ZRangeByScore(q abi.ZRangeRequest) (abi.Members, error) {
	r.zrange++
	return r.Host.ZRangeByScore(q)
}
func (r *roundTrips) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	r.reads++
	return r.Host.ReadBatch(ops)
}
func (r *roundTrips) FCall(calls []abi.Call) ([]abi.CallResult, error) {
	r.fcalls++
	return r.Host.FCall(calls)
}

// TestDueBatchSharesRoundTrips: a batch of partitions whose first pages
// hold everything due costs one clock read, one index read batch, one
// pre-read batch and one FCALL batch, whatever the partition count.
func TestDueBatchSharesRoundTrips(t *testing.T) {
	t.Parallel()
	var parts []model.Partition
	var req abi.ScanBatchRequest
	for i := range uint16(8) {
		parts = append(parts, model.Partition{Family: model.FamilyFlow, Index: i})
		req.Indexes = append(req.Indexes, i)
	}
	req.Family, req.Partitions, req.BatchSize = model.FamilyFlow, model.DefaultFlowPartitions, 2
	h := &roundTrips{Host: pdktest.New(t, dueTestPlugin.Manifest)}
	h.Handle("ff_mark_lease_expired_if_due", func(k, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK"}
	})
	h.NowMs = 10_000
	for _, p := range parts {
		h.ZAdd(model.KeysOn(p).LeaseExpiry(), 9_000, fmt.Sprintf("{fp:%d}:00000000-0000-4000-8000-000000000001", p.Index))
	}
	res := pdk.DueBatch(h, req, dueTestScan)
	for i, r := range res {
		if r != (abi.ScanResult{Scanned: 1, Acted: 1}) {
			t.Fatalf("partition %d: %+v", i, r)
		}
	}
	if h.now != 1 || h.zrange != 0 || h.reads != 2 || h.fcalls != 1 {
		t.Fatalf("round trips: now %d, zrange %d, read batches %d, fcall batches %d; want 1, 0, 2, 1", h.now, h.zrange, h.reads, h.fcalls)
	}
}
