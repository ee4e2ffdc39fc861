package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// ConfigNextDue is the config key the host sets to "1" when it runs
// due-time timers: a DueScan then reports the earliest not-yet-due score
// it saw as ScanResult.NextDueMs.
const ConfigNextDue = abi.ConfigNextDue

// Due is one due member of an index, as DueScan hands it to Call.
type Due struct {
	// Index is the index key the member was read from.
	Index string
	// Member is the index member (an execution id, a waitpoint id...).
	Member string
	// Score is the member's score (its due time in server ms).
	Score float64
	// NowMs is the server time the scan read the index at.
	NowMs int64
	// Reads are the results of PreRead's ops for this member, in order
	// (nil without PreRead).
	Reads []abi.ReadResult
}

// DueScan is the shared skeleton of every "due index" scanner: for each
// index of the partition, read the members whose score is due
// (ZRANGEBYSCORE index -inf now WITHSCORES LIMIT 0 batch), pre-read what
// the calls need for all of them in one pipelined read batch, then FCALL
// once per due member in one pipelined batch, through the host's failure
// tracker.
//
//	pdk.DueScan{
//		Indexes: func(req abi.ScanRequest) []string { return []string{keys.LaneDelayed("default")} },
//		Call: func(d pdk.Due) []abi.Call { return []abi.Call{{Function: "ff_promote_delayed", ...}} },
//	}.Run(h, req)
//
// # Notes
//
//   - Counting (fabric's, which fixes FlowFabric's): the first call Call
//     returns for a member is its action: {1, ...} is Acted, a Lua error
//     reply {0, code} or a failed call is an Error (FlowFabric counts a Lua
//     error reply as processed), a call in failure-tracker backoff is
//     Skipped. Further calls are cleanup: only their failures count (as
//     Errors). A member for which Call returns nothing, that the scanner
//     filter rejects, or that is not an execution id of this partition
//     (when Subject is nil) is Skipped. An index read that fails is one
//     Error.
//   - Round trips per index: one index read, at most one read batch (two
//     with a filter whose subject comes from the first), one FCALL batch;
//     never one per item.
//   - The scanner filter comes from the plugin config: "namespace" and
//     "instance_tag" ("key=value"), FlowFabric's ScannerFilter.
type DueScan struct {
	// Indexes returns the due-index keys of the partition, in scan order
	// (for example one delayed index per lane).
	Indexes func(req abi.ScanRequest) []string
	// Max returns the ZRANGEBYSCORE max for now (default now itself, so a
	// score equal to now is due).
	Max func(nowMs int64) int64
	// PreRead, when set, returns the read ops one member needs; the ops of
	// every member run in one pipelined Read and come back in Due.Reads.
	PreRead func(index, member string) []abi.ReadOp
	// Subject returns the execution id the scanner filter applies to
	// (default: the member, which must then parse as an execution id of
	// the partition). "" skips the member.
	Subject func(d Due) string
	// Call builds the FCALLs for one due member: the action first, then any
	// cleanup calls. Nil skips the member.
	Call func(d Due) []abi.Call
	// Later, when set, is told of a member Call skipped because it is not
	// due yet by the plugin's own rule, with its due time; the earliest
	// becomes NextDueMs.
	Later func(d Due) int64
	// Pages is the most index pages read per index when a page ends up
	// with skipped members (default 1): later pages are read from where the
	// last ended, so members that are not actionable cannot starve the
	// rest.
	Pages int
	// NextDue makes Run report the earliest not-yet-due score of each index
	// in NextDueMs (its index reads run to +inf and take one member more
	// than a page: no extra read). It is also on when the host sets
	// ConfigNextDue.
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
	maxScore := now
	if s.Max != nil {
		maxScore = s.Max(now)
	}
	max := strconv.FormatInt(maxScore, 10)
	batch := req.BatchSize
	if batch == 0 {
		batch = abi.DefaultBatchSize
	}
	nextDue := s.NextDue
	if v, ok := h.Config(ConfigNextDue); ok && v == "1" {
		nextDue = true
	}
	filter := FilterFromConfig(h)
	pages := max1(s.Pages)
	for _, index := range s.Indexes(req) {
		full := false
		for page := 0; page < pages; page++ {
			// With next due wanted, one read serves both: a page plus one
			// member past it, to +inf; the first not yet due is the next.
			r := abi.ZRangeRequest{Key: index, Min: "-inf", Max: max, Offset: uint32(page) * batch, Count: batch, WithScores: true}
			if nextDue {
				r.Max, r.Count = "+inf", batch+1
			}
			due, err := h.ZRangeByScore(r)
			if err != nil {
				h.Log(abi.LogWarn, "zrangebyscore "+index+": "+err.Error())
				res.Errors++
				break
			}
			if nextDue {
				due = splitDue(due, maxScore, batch, &res)
			}
			res.Scanned += uint32(len(due.Members))
			full = uint32(len(due.Members)) == batch
			acted := s.runPage(h, req, &res, index, due, now, filter)
			if !full || acted == len(due.Members) {
				break
			}
		}
	}
	return res
}

// splitDue cuts a page read to +inf at maxScore: the members due (at most
// batch) stay in the page; the first one not yet due, when the page
// reached it, is the next due time (added to res). A page that is not
// full of due members either reached one not yet due or ended the index,
// so no further read is needed for the next due time.
func splitDue(page abi.Members, maxScore int64, batch uint32, res *abi.ScanResult) abi.Members {
	n := 0
	for n < len(page.Scores) && n < len(page.Members) && page.Scores[n] <= float64(maxScore) {
		n++
	}
	if uint32(n) > batch {
		n = int(batch)
	}
	if n < len(page.Members) && n < len(page.Scores) && page.Scores[n] > float64(maxScore) {
		res.Add(abi.ScanResult{NextDueMs: int64(page.Scores[n])})
	}
	return abi.Members{Members: page.Members[:n], Scores: page.Scores[:n]}
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// runPage handles one page of due members and returns how many got an
// action call.
func (s DueScan) runPage(h Host, req abi.ScanRequest, res *abi.ScanResult, index string, due abi.Members, now int64, filter Filter) int {
	if len(due.Members) == 0 {
		return 0
	}
	items := make([]Due, 0, len(due.Members))
	for i, m := range due.Members {
		d := Due{Index: index, Member: m, NowMs: now}
		if i < len(due.Scores) {
			d.Score = due.Scores[i]
		}
		if s.Subject == nil && !OnPartition(m, req.Partition) {
			h.Log(abi.LogWarn, "skipping malformed index member "+strconv.Quote(m)+" of "+index)
			res.Skipped++
			continue
		}
		items = append(items, d)
	}
	if s.PreRead != nil && len(items) > 0 {
		var ops []abi.ReadOp
		counts := make([]int, len(items))
		for i, d := range items {
			o := s.PreRead(index, d.Member)
			counts[i] = len(o)
			ops = append(ops, o...)
		}
		if len(ops) > 0 {
			out, err := h.ReadBatch(ops)
			if err != nil {
				h.Log(abi.LogWarn, "pre-read for "+index+": "+err.Error())
				res.Errors += uint32(len(items))
				return 0
			}
			for i := range items {
				items[i].Reads, out = out[:counts[i]], out[counts[i]:]
			}
		}
	}
	if !filter.Noop() {
		subjects := make([]string, len(items))
		for i, d := range items {
			subjects[i] = d.Member
			if s.Subject != nil {
				subjects[i] = s.Subject(d)
			}
		}
		keep := filter.Keep(h, req.Partition, subjects)
		kept := items[:0]
		for i, d := range items {
			if keep[i] {
				kept = append(kept, d)
			} else {
				res.Skipped++
			}
		}
		items = kept
	}
	var calls []abi.Call
	var actions []int // index into calls of each action call
	for _, d := range items {
		cs := s.Call(d)
		if len(cs) == 0 {
			res.Skipped++
			if s.Later != nil {
				if at := s.Later(d); at > 0 {
					res.Add(abi.ScanResult{NextDueMs: at})
				}
			}
			continue
		}
		if cs[0].Item == "" {
			cs[0].Item = d.Member
		}
		actions = append(actions, len(calls))
		calls = append(calls, cs...)
	}
	if len(calls) == 0 {
		return 0
	}
	out, err := h.FCall(calls)
	if err != nil {
		h.Log(abi.LogWarn, "fcall batch on "+index+": "+err.Error())
		res.Errors += uint32(len(actions))
		return len(actions)
	}
	isAction := make(map[int]bool, len(actions))
	for _, i := range actions {
		isAction[i] = true
	}
	for i, r := range out {
		switch {
		case isAction[i]:
			countCall(res, r)
		case r.Result != abi.StatusOK && !r.DryRun():
			h.Log(abi.LogWarn, "cleanup "+calls[i].Function+" failed: "+r.Status)
			res.Errors++
		}
	}
	return len(actions)
}

func countCall(res *abi.ScanResult, r abi.CallResult) {
	switch r.Result {
	case abi.StatusOK, abi.StatusDryRun: // a shadow's dry run is what it would have done
		res.Acted++
	case abi.StatusSkipped:
		res.Skipped++
	default:
		res.Errors++
	}
}

// OnPartition reports whether s is an execution id of partition p (the
// id embeds its partition; index members that are not are skipped rather
// than spliced into keys).
func OnPartition(s string, p model.Partition) bool {
	id, err := model.ParseExecutionID(s)
	return err == nil && id.Partition() == p
}
