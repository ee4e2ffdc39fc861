package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
)

// DueScan is the shared skeleton of every "due index" scanner: for each
// index of the partition, read the members whose score is due
// (ZRANGEBYSCORE index -inf now LIMIT 0 batch), then FCALL once per due
// member in one pipelined batch, through the host's failure tracker.
//
//	pdk.DueScan{
//		Indexes: func(req abi.ScanRequest) []string { return []string{keys.LaneDelayed("default")} },
//		Call: func(index, member string, nowMs int64) abi.Call { ... },
//	}.Run(h, req)
//
// # Notes
//
//   - Counting follows FlowFabric: a call that returns {1, ...} is Acted
//     (whatever its status), a Lua error or failed call is an Error, a call
//     in failure-tracker backoff is Skipped; an index read that fails is one
//     Error.
//   - One host round trip reads the clock, one per index reads it, one per
//     index runs the batch: never one per item.
type DueScan struct {
	// Indexes returns the due-index keys of the partition, in scan order
	// (for example one delayed index per lane).
	Indexes func(req abi.ScanRequest) []string
	// Call builds the FCALL for one due member of index, at server time
	// nowMs.
	Call func(index, member string, nowMs int64) abi.Call
	// NextDue, when set, makes Run read the earliest not-yet-due score of
	// each index (one more ZRANGEBYSCORE per index) into NextDueMs.
	NextDue bool
}

// Run scans one partition.
func (s DueScan) Run(h Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	now, err := h.Now()
	if err != nil {
		h.Log(abi.LogWarn, "now: "+err.Error())
		res.Errors++
		return res
	}
	max := strconv.FormatInt(now, 10)
	batch := req.BatchSize
	if batch == 0 {
		batch = abi.DefaultBatchSize
	}
	calls := make([]abi.Call, 0, batch)
	for _, index := range s.Indexes(req) {
		due, err := h.ZRangeByScore(abi.ZRangeRequest{Key: index, Min: "-inf", Max: max, Count: batch})
		if err != nil {
			h.Log(abi.LogWarn, "zrangebyscore "+index+": "+err.Error())
			res.Errors++
			continue
		}
		res.Scanned += uint32(len(due.Members))
		if len(due.Members) > 0 {
			calls = calls[:0]
			for _, m := range due.Members {
				c := s.Call(index, m, now)
				if c.Item == "" {
					c.Item = m
				}
				calls = append(calls, c)
			}
			out, err := h.FCall(calls)
			if err != nil {
				h.Log(abi.LogWarn, "fcall batch on "+index+": "+err.Error())
				res.Errors += uint32(len(calls))
			} else {
				countCalls(&res, out)
			}
		}
		if s.NextDue && uint32(len(due.Members)) < batch {
			next, err := h.ZRangeByScore(abi.ZRangeRequest{Key: index, Min: "(" + max, Max: "+inf", Count: 1, WithScores: true})
			if err == nil && len(next.Scores) == 1 {
				res.Add(abi.ScanResult{NextDueMs: int64(next.Scores[0])})
			}
		}
	}
	return res
}

func countCalls(res *abi.ScanResult, out []abi.CallResult) {
	for _, r := range out {
		switch r.Result {
		case abi.StatusOK:
			res.Acted++
		case abi.StatusSkipped:
			res.Skipped++
		default:
			res.Errors++
		}
	}
}
