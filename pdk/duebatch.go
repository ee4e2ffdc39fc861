package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
)

// maxDueBatchReads bounds the index reads DueBatch pipelines at once;
// a bigger batch is scanned partition by partition.
const maxDueBatchReads = 4096

// DueBatch scans the partitions of a fabric_scan_batch call together, as
// Plugin.ScanBatch: scan(req.Request(i)) is partition i's DueScan, and
// their round trips are shared — one server time read, one pipelined read
// of every index's first page (see firstPageReads), one read
// batch of every pre-read, one FCALL batch of every due member's calls —
// so a burst due on many partitions costs four round trips rather than
// four per partition. Further pages (DueScan.Pages) are read index by
// index, as DueScan.Run does. Results and counting are Run's, partition
// by partition, in req.Indexes order.
//
//	var Plugin = pdk.Plugin{
//		Scan:      func(h pdk.Host, req abi.ScanRequest) abi.ScanResult { return dueScan(req).Run(h, req) },
//		ScanBatch: func(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult { return pdk.DueBatch(h, req, dueScan) },
//	}
func DueBatch(h Host, req abi.ScanBatchRequest, scan func(req abi.ScanRequest) DueScan) []abi.ScanResult {
	res := make([]abi.ScanResult, len(req.Indexes))
	now, err := h.Now()
	if err != nil {
		h.Log(abi.LogWarn, "now: "+err.Error())
		for i := range res {
			res[i].Errors++
		}
		return res
	}
	type part struct {
		req abi.ScanRequest
		s   DueScan
		q   dueQuery
	}
	type indexRead struct {
		part  int
		index string
	}
	parts := make([]part, len(req.Indexes))
	var (
		ops   []abi.ReadOp
		reads []indexRead
	)
	for i := range parts {
		r := req.Request(i)
		s := scan(r)
		p := part{req: r, s: s, q: s.query(h, r, now)}
		parts[i] = p
		for _, index := range s.Indexes(r) {
			ops = append(ops, p.q.firstPageReads(index)...)
			reads = append(reads, indexRead{i, index})
		}
	}
	if len(ops) == 0 {
		return res
	}
	if len(ops) > maxDueBatchReads {
		for i, p := range parts {
			for _, index := range p.s.Indexes(p.req) {
				p.s.runIndex(h, p.req, &res[i], p.q, index, 0)
			}
		}
		return res
	}
	got, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "zrangebyscore batch: "+err.Error())
		for _, r := range reads {
			res[r.part].Errors++
		}
		return res
	}

	// One page per index read, then every page's pre-reads in one batch.
	type pageOf struct {
		duePage
		part, scanned int
		counts        []int
		lo, hi        int // the page's span of the FCALL batch
	}
	pages := make([]pageOf, 0, len(reads))
	var pre []abi.ReadOp
	for _, r := range reads {
		p := &parts[r.part]
		n := 1
		if p.q.nextDue {
			n = 2
		}
		page, err := p.q.firstPage(got[:n])
		got = got[n:]
		if err != nil {
			h.Log(abi.LogWarn, "zrangebyscore "+r.index+": "+err.Error())
			res[r.part].Errors++
			continue
		}
		due := p.q.cut(page, &res[r.part])
		pg := pageOf{duePage: p.s.newPage(h, p.req, &res[r.part], r.index, due, now), part: r.part, scanned: len(due.Members)}
		pg.full = uint32(len(due.Members)) == p.q.batch
		var o []abi.ReadOp
		o, pg.counts = p.s.preReadOps(pg.items)
		pre = append(pre, o...)
		pages = append(pages, pg)
	}
	if len(pre) > 0 {
		out, err := h.ReadBatch(pre)
		for k := range pages {
			pg := &pages[k]
			switch {
			case pg.counts == nil:
			case err != nil:
				pg.preReadFailed(h, err)
			default:
				out = spreadReads(pg.items, pg.counts, out)
			}
		}
	}

	// Every page's calls in one FCALL batch.
	var calls []abi.Call
	for k := range pages {
		pg := &pages[k]
		s := parts[pg.part].s
		s.filterPage(h, &pg.duePage, parts[pg.part].q.filter)
		pg.lo = len(calls)
		calls = append(calls, s.pageCalls(&pg.duePage)...)
		pg.hi = len(calls)
	}
	if len(calls) > 0 {
		out, err := h.FCall(calls)
		for k := range pages {
			pg := &pages[k]
			if pg.lo == pg.hi {
				continue
			}
			var mine []abi.CallResult
			if err == nil && len(out) >= pg.hi {
				mine = out[pg.lo:pg.hi]
			}
			pg.count(h, calls[pg.lo:pg.hi], mine, err)
		}
	}

	// A full page with members not acted on: the rest of its index.
	for _, pg := range pages {
		p := parts[pg.part]
		if pg.full && len(pg.actions) != pg.scanned && max1(p.s.Pages) > 1 {
			p.s.runIndex(h, p.req, &res[pg.part], p.q, pg.index, 1)
		}
	}
	return res
}

// firstPageReads are the read-batch ops of an index's first page: the
// due members (ZRANGE … BYSCORE LIMIT 0 n WITHSCORES), and with next due
// wanted, one member more plus — a second op — the first not yet due,
// rather than Run's one read to +inf, which moves a page of members not
// due yet on every scan of an index that holds them (a burst's future
// work) when the pipeline gives the second read for free.
func (q dueQuery) firstPageReads(index string) []abi.ReadOp {
	zr := func(min, max string, n uint32) abi.ReadOp {
		return abi.ReadOp{Cmd: "ZRANGE", Key: index, Args: []string{min, max, "BYSCORE", "LIMIT", "0", strconv.FormatUint(uint64(n), 10), "WITHSCORES"}}
	}
	if !q.nextDue {
		return []abi.ReadOp{zr("-inf", q.max, q.batch)}
	}
	return []abi.ReadOp{zr("-inf", q.max, q.batch+1), zr("("+q.max, "+inf", 1)}
}

// firstPage is the page firstPageReads's replies make: what Run's read of
// the first page would have returned as far as cut looks (the due
// members, then the first not yet due unless the due ones overflow the
// page).
func (q dueQuery) firstPage(rs []abi.ReadResult) (abi.Members, error) {
	page, err := membersOf(rs[0])
	if err != nil || len(rs) < 2 || len(page.Members) > int(q.batch) {
		return page, err
	}
	next, err := membersOf(rs[1])
	if err != nil {
		return page, err
	}
	page.Members = append(page.Members, next.Members...)
	page.Scores = append(page.Scores, next.Scores...)
	return page, nil
}

// membersOf reads a ZRANGE … WITHSCORES reply (member, score, …).
func membersOf(r abi.ReadResult) (abi.Members, error) {
	if r.Err != "" {
		return abi.Members{}, abi.Errorf(abi.CodeBackend, r.Err)
	}
	var m abi.Members
	for i := 0; i+1 < len(r.Values); i += 2 {
		score, err := strconv.ParseFloat(r.Values[i+1], 64)
		if err != nil {
			return abi.Members{}, abi.Errorf(abi.CodeBackend, "score "+strconv.Quote(r.Values[i+1])+" of "+strconv.Quote(r.Values[i]))
		}
		m.Members = append(m.Members, r.Values[i])
		m.Scores = append(m.Scores, score)
	}
	return m, nil
}
