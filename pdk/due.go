package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
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
//     returns for a member is its action: {1, ...} is Acted (but
//     {1, "ALREADY_SATISFIED", ...}, a no-op, is Skipped), a Lua error
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
	q := s.query(h, req, now)
	for _, index := range s.Indexes(req) {
		s.runIndex(h, req, &res, q, index, 0)
	}
	return res
}

// dueQuery is what every index read of one scan shares.
type dueQuery struct {
	now, maxScore int64
	max           string
	batch         uint32
	nextDue       bool
	filter        Filter
}

func (s DueScan) query(h Host, req abi.ScanRequest, now int64) dueQuery {
	q := dueQuery{now: now, maxScore: now, batch: req.BatchSize, nextDue: s.NextDue}
	if s.Max != nil {
		q.maxScore = s.Max(now)
	}
	q.max = strconv.FormatInt(q.maxScore, 10)
	if q.batch == 0 {
		q.batch = abi.DefaultBatchSize
	}
	if v, ok := h.Config(ConfigNextDue); ok && v == "1" {
		q.nextDue = true
	}
	q.filter = FilterFromConfig(h)
	return q
}

// pageRequest is the index read of page page (with next due wanted, one
// read serves both: a page plus one member past it, to +inf; the first
// not yet due is the next).
func (q dueQuery) pageRequest(index string, page int) abi.ZRangeRequest {
	r := abi.ZRangeRequest{Key: index, Min: "-inf", Max: q.max, Offset: uint32(page) * q.batch, Count: q.batch, WithScores: true}
	if q.nextDue {
		r.Max, r.Count = "+inf", q.batch+1
	}
	return r
}

// cut is the due part of a page read (see splitDue).
func (q dueQuery) cut(page abi.Members, res *abi.ScanResult) abi.Members {
	if q.nextDue {
		page = splitDue(page, q.maxScore, q.batch, res)
	}
	res.Scanned += uint32(len(page.Members))
	return page
}

// runIndex scans index from page from on, one page at a time.
func (s DueScan) runIndex(h Host, req abi.ScanRequest, res *abi.ScanResult, q dueQuery, index string, from int) {
	for page := from; page < max1(s.Pages); page++ {
		due, err := h.ZRangeByScore(q.pageRequest(index, page))
		if err != nil {
			h.Log(abi.LogWarn, "zrangebyscore "+index+": "+err.Error())
			res.Errors++
			return
		}
		due = q.cut(due, res)
		acted := s.runPage(h, req, res, index, due, q.now, q.filter)
		if uint32(len(due.Members)) != q.batch || acted == len(due.Members) {
			return
		}
	}
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
	pg := s.newPage(h, req, res, index, due, now)
	if len(pg.items) == 0 {
		return 0
	}
	if ops, counts := s.preReadOps(pg.items); len(ops) > 0 {
		out, err := h.ReadBatch(ops)
		if err != nil {
			pg.preReadFailed(h, err)
			return 0
		}
		spreadReads(pg.items, counts, out)
	}
	s.filterPage(h, &pg, filter)
	calls := s.pageCalls(&pg)
	if len(calls) == 0 {
		return 0
	}
	out, err := h.FCall(calls)
	pg.count(h, calls, out, err)
	return len(pg.actions)
}

// duePage is one page of due members of an index on its way through
// runPage's steps (or DueBatch's, many pages at a time).
type duePage struct {
	req   abi.ScanRequest
	res   *abi.ScanResult
	index string
	items []Due
	// full: the index read filled the page (more may follow).
	full bool
	// actions index the page's calls that are actions.
	actions []int
}

// newPage makes a page of the members due, skipping those that are not
// execution ids of the partition (when Subject is nil).
func (s DueScan) newPage(h Host, req abi.ScanRequest, res *abi.ScanResult, index string, due abi.Members, now int64) duePage {
	pg := duePage{req: req, res: res, index: index}
	if len(due.Members) == 0 {
		return pg
	}
	pg.items = make([]Due, 0, len(due.Members))
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
		pg.items = append(pg.items, d)
	}
	return pg
}

// preReadOps are PreRead's ops of items, in order, and how many each
// item has.
func (s DueScan) preReadOps(items []Due) (ops []abi.ReadOp, counts []int) {
	if s.PreRead == nil {
		return nil, nil
	}
	counts = make([]int, len(items))
	for i, d := range items {
		o := s.PreRead(d.Index, d.Member)
		counts[i] = len(o)
		ops = append(ops, o...)
	}
	return ops, counts
}

// spreadReads hands each item its counts[i] replies of out and returns
// the rest.
func spreadReads(items []Due, counts []int, out []abi.ReadResult) []abi.ReadResult {
	for i := range items {
		n := min(counts[i], len(out))
		items[i].Reads, out = out[:n], out[n:]
	}
	return out
}

// preReadFailed counts every item of the page as an Error: none is acted
// on.
func (pg *duePage) preReadFailed(h Host, err error) {
	h.Log(abi.LogWarn, "pre-read for "+pg.index+": "+err.Error())
	pg.res.Errors += uint32(len(pg.items))
	pg.items = nil
}

// filterPage drops the items the scanner filter rejects (Skipped).
func (s DueScan) filterPage(h Host, pg *duePage, filter Filter) {
	if filter.Noop() || len(pg.items) == 0 {
		return
	}
	subjects := make([]string, len(pg.items))
	for i, d := range pg.items {
		subjects[i] = d.Member
		if s.Subject != nil {
			subjects[i] = s.Subject(d)
		}
	}
	keep := filter.Keep(h, pg.req.Partition, subjects)
	kept := pg.items[:0]
	for i, d := range pg.items {
		if keep[i] {
			kept = append(kept, d)
		} else {
			pg.res.Skipped++
		}
	}
	pg.items = kept
}

// pageCalls builds the page's FCALLs (pg.actions marks the actions).
func (s DueScan) pageCalls(pg *duePage) []abi.Call {
	var calls []abi.Call
	for _, d := range pg.items {
		cs := s.Call(d)
		if len(cs) == 0 {
			pg.res.Skipped++
			if s.Later != nil {
				if at := s.Later(d); at > 0 {
					pg.res.Add(abi.ScanResult{NextDueMs: at})
				}
			}
			continue
		}
		if cs[0].Item == "" {
			cs[0].Item = d.Member
		}
		pg.actions = append(pg.actions, len(calls))
		calls = append(calls, cs...)
	}
	return calls
}

// count books the replies (or the failure) of the page's calls.
func (pg *duePage) count(h Host, calls []abi.Call, out []abi.CallResult, err error) {
	if err != nil {
		h.Log(abi.LogWarn, "fcall batch on "+pg.index+": "+err.Error())
		pg.res.Errors += uint32(len(pg.actions))
		return
	}
	isAction := make(map[int]bool, len(pg.actions))
	for _, i := range pg.actions {
		isAction[i] = true
	}
	for i, r := range out {
		switch {
		case isAction[i]:
			countCall(pg.res, r)
		case r.Result != abi.StatusOK && !r.DryRun():
			h.Log(abi.LogWarn, "cleanup "+calls[i].Function+" failed: "+r.Status)
			pg.res.Errors++
		}
	}
}

func countCall(res *abi.ScanResult, r abi.CallResult) {
	switch r.Result {
	case abi.StatusOK:
		if r.Status == fcall.StatusAlreadySatisfied {
			res.Skipped++ // a no-op: the work was already done
			return
		}
		res.Acted++
	case abi.StatusDryRun: // a shadow's dry run is what it would have done
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
