// Command unblock is the fabric scanner plugin that unblocks executions
// whose admission block has cleared (FlowFabric's unblock, engine spec
// §9.11: 5 s, 100 per blocked set). For each lane it reads the 100 oldest
// entries of blocked:budget, blocked:quota and blocked:route, checks the
// condition of each (budget under every hard limit, quota under its rate
// and concurrency caps, required capabilities offered by a worker of the
// execution's namespace), and runs ff_unblock_execution for the cleared
// ones in one pipelined batch.
//
// Reads go in pipelined batches per set (exec cores, then budget limits or
// quota definitions, then usage or window counts), not one round trip per
// item. Differences from FlowFabric v0.8.1, on purpose:
//   - the quota rate check counts the window (ZCOUNT (cutoff +inf) instead
//     of trimming it with ZREMRANGEBYSCORE: a check must not write;
//   - workers and capabilities use the namespaced layout fabric's
//     ff_register_worker writes (FlowFabric HEAD, RFC-025): an execution
//     without a namespace is skipped and counted as an error.
//
// Configuration: "lanes", "namespace" / "instance_tag" (filter),
// "budget_partitions" and "quota_partitions" (the host fills them with the
// deployment's counts; 32 each under a host that does not).
package main

import (
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the unblock scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: func() abi.Manifest {
		m := pdk.Scanner("unblock", 5000, 100, []string{"ff_unblock_execution"},
			[]string{"ff:idx:*:lane:*:blocked:*", "ff:budget:*", "ff:quota:*", "ff:idx:*:workers", "ff:worker:*:caps"},
			map[string]string{pdk.ConfigBudgetPartitions: "32", pdk.ConfigQuotaPartitions: "32"})
		m.Capabilities.CrossPartition = true // budgets, quotas and workers live elsewhere
		return m
	}(),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

// set is one blocked index: lane's ZSET of executions blocked with reason.
type set struct {
	lane, reason, key string
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	now, err := h.Now()
	if err != nil {
		res.Errors++
		return res
	}
	pk := model.KeysOn(req.Partition)
	u := &unblocker{h: h, req: req, now: now, pk: pk, parts: pdk.PartitionsFromConfig(h, req.Partitions), breached: map[string]bool{}, filter: pdk.FilterFromConfig(h)}
	// The head of every blocked set in one pipelined batch: most are
	// empty, and a round trip per set was three per lane per partition.
	var sets []set
	var ops []abi.ReadOp
	for _, lane := range pdk.Lanes(h) {
		for _, reason := range []string{"waiting_for_budget", "waiting_for_quota", "waiting_for_capable_worker"} {
			s := set{lane: lane, reason: reason, key: fcall.BlockedIndexFor(pk, lane, reason)}
			sets = append(sets, s)
			ops = append(ops, abi.ReadOp{Cmd: "ZRANGE", Key: s.key,
				Args: []string{"-inf", "+inf", "BYSCORE", "LIMIT", "0", strconv.FormatUint(uint64(max(req.BatchSize, 1)), 10)}})
		}
	}
	heads, err := h.ReadBatch(ops)
	if err == nil && len(heads) != len(ops) {
		err = abi.Errorf(abi.CodeBackend, "short read batch")
	}
	if err != nil {
		h.Log(abi.LogWarn, "read the blocked sets: "+err.Error())
		res.Errors++
		return res
	}
	for i, s := range sets {
		if heads[i].Err != "" {
			h.Log(abi.LogWarn, "zrange "+s.key+": "+heads[i].Err)
			res.Errors++
			continue
		}
		if len(heads[i].Values) > 0 {
			res.Add(u.scanSet(s, heads[i].Values))
		}
	}
	return res
}

type unblocker struct {
	h        pdk.Host
	req      abi.ScanRequest
	now      int64
	pk       model.PartitionKeys
	parts    model.PartitionConfig
	breached map[string]bool // budget id -> breached, for this partition call
	filter   pdk.Filter
}

type candidate struct {
	eid                          string
	ns, budgets, quota, required string
}

// scanSet checks the head of one blocked set (members, oldest first) and
// unblocks the executions whose block has cleared.
func (u *unblocker) scanSet(s set, members []string) abi.ScanResult {
	var res abi.ScanResult
	h := u.h
	res.Scanned = uint32(len(members))
	var ids []string
	for _, id := range members {
		if pdk.OnPartition(id, u.req.Partition) {
			ids = append(ids, id)
		} else {
			res.Skipped++
		}
	}
	keep := u.filter.Keep(h, u.req.Partition, ids)
	var ops []abi.ReadOp
	var kept []string
	for i, id := range ids {
		if !keep[i] {
			res.Skipped++
			continue
		}
		kept = append(kept, id)
		ops = append(ops, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(id)).Core(),
			Args: []string{"blocking_reason", "namespace", "budget_ids", "quota_policy_id", "required_capabilities"}})
	}
	if len(ops) == 0 {
		return res
	}
	out, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "read cores of "+s.key+": "+err.Error())
		res.Errors += uint32(len(kept))
		return res
	}
	var cands []candidate
	for i, id := range kept {
		r := out[i]
		if r.Err != "" {
			res.Errors++
			continue
		}
		if pdk.FieldOr(r, 0, "") != s.reason {
			res.Skipped++ // e.g. paused_by_flow_cancel: not ours to clear
			continue
		}
		c := candidate{eid: id, ns: pdk.FieldOr(r, 1, ""), budgets: pdk.FieldOr(r, 2, ""), quota: pdk.FieldOr(r, 3, ""), required: pdk.FieldOr(r, 4, "")}
		if s.reason == "waiting_for_capable_worker" && c.ns == "" {
			h.Log(abi.LogWarn, "execution "+id+" has no namespace; cannot check its capabilities")
			res.Errors++
			continue
		}
		cands = append(cands, c)
	}
	var cleared []candidate
	switch s.reason {
	case "waiting_for_budget":
		cleared = u.budgetCleared(cands)
	case "waiting_for_quota":
		cleared = u.quotaCleared(cands)
	default:
		cleared = u.routeCleared(cands)
	}
	res.Skipped += uint32(len(cands) - len(cleared))
	if len(cleared) == 0 {
		return res
	}
	calls := make([]abi.Call, len(cleared))
	for i, c := range cleared {
		p := fcall.UnblockExecutionParams{ExecutionID: model.ExecutionID(c.eid), Lane: s.lane,
			BlockingReason: s.reason, ExpectedReason: s.reason, NowMs: u.now}
		calls[i] = pdk.CallOf(p.Call())
	}
	results, err := h.FCall(calls)
	if err != nil {
		h.Log(abi.LogWarn, "fcall batch on "+s.key+": "+err.Error())
		res.Errors += uint32(len(calls))
		return res
	}
	for _, r := range results {
		if r.OK() {
			res.Acted++
		} else {
			res.Errors++
		}
	}
	return res
}

func csv(s string, trim bool) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if trim {
			t = strings.TrimSpace(t)
		}
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// budgetCleared keeps the candidates whose every budget is under all its
// hard limits (breached iff usage >= limit > 0; a limits read error counts
// as breached; an id that is not a UUID as not breached).
func (u *unblocker) budgetCleared(cands []candidate) []candidate {
	var todo []string
	seen := map[string]bool{}
	for _, c := range cands {
		for _, b := range csv(c.budgets, true) {
			if _, ok := u.breached[b]; !ok && !seen[b] {
				seen[b] = true
				todo = append(todo, b)
			}
		}
	}
	if len(todo) > 0 {
		u.loadBudgets(todo)
	}
	var out []candidate
	for _, c := range cands {
		ok := true
		for _, b := range csv(c.budgets, true) {
			if u.breached[b] {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, c)
		}
	}
	return out
}

func (u *unblocker) loadBudgets(ids []string) {
	h := u.h
	var ops []abi.ReadOp
	var keys []model.BudgetKeys
	var valid []string
	for _, b := range ids {
		id, err := model.ParseUUID(b)
		if err != nil {
			u.breached[b] = false
			continue
		}
		k := model.BudgetKeysFor(u.parts.BudgetPartition(id), id)
		keys = append(keys, k)
		valid = append(valid, b)
		ops = append(ops, abi.ReadOp{Cmd: "HGETALL", Key: k.Limits()})
	}
	if len(ops) == 0 {
		return
	}
	limits, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "read budget limits: "+err.Error())
		for _, b := range valid {
			u.breached[b] = true
		}
		return
	}
	type hard struct {
		budget int
		dim    string
		limit  uint64
	}
	var checks []hard
	ops = ops[:0]
	for i, r := range limits {
		if r.Err != "" {
			u.breached[valid[i]] = true
			continue
		}
		u.breached[valid[i]] = false
		for f, v := range r.Map() {
			dim, ok := strings.CutPrefix(f, "hard:")
			if !ok {
				continue
			}
			lim, err := strconv.ParseUint(v, 10, 64)
			if err != nil || lim == 0 {
				continue
			}
			checks = append(checks, hard{i, dim, lim})
			ops = append(ops, abi.ReadOp{Cmd: "HGET", Key: keys[i].Usage(), Args: []string{dim}})
		}
	}
	if len(ops) == 0 {
		return
	}
	usage, err := h.ReadBatch(ops)
	if err != nil {
		for _, c := range checks {
			u.breached[valid[c.budget]] = true
		}
		return
	}
	for j, c := range checks {
		if usage[j].Err != "" {
			u.breached[valid[c.budget]] = true
			continue
		}
		v, _ := usage[j].Value()
		used, _ := strconv.ParseUint(v, 10, 64)
		if used >= c.limit {
			u.breached[valid[c.budget]] = true
		}
	}
}

// quotaCleared keeps the candidates whose quota policy admits one more:
// window count under max_requests_per_window and concurrency under
// active_concurrency_cap. Read errors keep the block.
func (u *unblocker) quotaCleared(cands []candidate) []candidate {
	h := u.h
	var out []candidate
	var need []candidate
	var keys []model.QuotaKeys
	var ops []abi.ReadOp
	for _, c := range cands {
		id, err := model.ParseUUID(c.quota)
		if c.quota == "" || err != nil {
			out = append(out, c)
			continue
		}
		k := model.QuotaKeysFor(u.parts.QuotaPartition(id), id)
		need, keys = append(need, c), append(keys, k)
		ops = append(ops, abi.ReadOp{Cmd: "HMGET", Key: k.Definition(), Args: []string{"max_requests_per_window", "requests_per_window_seconds", "active_concurrency_cap"}})
	}
	if len(ops) == 0 {
		return out
	}
	defs, err := h.ReadBatch(ops)
	if err != nil {
		return out
	}
	type check struct {
		cand          int
		rate, cap     uint64
		rateOp, capOp int
	}
	var checks []check
	ops = ops[:0]
	for i, d := range defs {
		if d.Err != "" {
			continue
		}
		rate, _ := strconv.ParseUint(pdk.FieldOr(d, 0, "0"), 10, 64)
		secs, err := strconv.ParseUint(pdk.FieldOr(d, 1, "60"), 10, 64)
		if err != nil {
			secs = 60
		}
		cp, _ := strconv.ParseUint(pdk.FieldOr(d, 2, "0"), 10, 64)
		c := check{cand: i, rate: rate, cap: cp, rateOp: -1, capOp: -1}
		if rate > 0 {
			cutoff := u.now - int64(secs)*1000
			c.rateOp = len(ops)
			ops = append(ops, abi.ReadOp{Cmd: "ZCOUNT", Key: keys[i].Window("requests_per_window"), Args: []string{"(" + pdk.Itoa(cutoff), "+inf"}})
		}
		if cp > 0 {
			c.capOp = len(ops)
			ops = append(ops, abi.ReadOp{Cmd: "GET", Key: keys[i].Concurrency()})
		}
		checks = append(checks, c)
	}
	var counts []abi.ReadResult
	if len(ops) > 0 {
		if counts, err = h.ReadBatch(ops); err != nil {
			return out
		}
	}
	num := func(i int) uint64 {
		v, _ := counts[i].Value()
		n, _ := strconv.ParseInt(v, 10, 64)
		if n < 0 {
			return 0
		}
		return uint64(n)
	}
	for _, c := range checks {
		if c.rateOp >= 0 && (counts[c.rateOp].Err != "" || num(c.rateOp) >= c.rate) {
			continue
		}
		if c.capOp >= 0 && num(c.capOp) >= c.cap {
			continue
		}
		out = append(out, need[c.cand])
	}
	return out
}

// capsCache is the capability union per namespace, kept across calls of
// this instance for one interval (FlowFabric caches it for the scanner
// interval).
var capsCache = map[string]struct {
	at   int64
	caps map[string]bool
}{}

// routeCleared keeps the candidates whose every required capability some
// live worker of their namespace offers. A failed load clears (fail-open,
// as FlowFabric).
func (u *unblocker) routeCleared(cands []candidate) []candidate {
	var out []candidate
	for _, c := range cands {
		req := csv(c.required, false)
		if len(req) == 0 {
			out = append(out, c)
			continue
		}
		caps, ok := u.caps(c.ns)
		if !ok {
			out = append(out, c)
			continue
		}
		all := true
		for _, r := range req {
			if !caps[r] {
				all = false
				break
			}
		}
		if all {
			out = append(out, c)
		}
	}
	return out
}

func (u *unblocker) caps(ns string) (map[string]bool, bool) {
	ttl := int64(5000)
	if e, ok := capsCache[ns]; ok && u.now-e.at < ttl && u.now >= e.at {
		return e.caps, true
	}
	h := u.h
	union := map[string]bool{}
	cursor := "0"
	for {
		page, err := h.SScan(abi.ScanCursorRequest{Key: model.WorkersIndexKey(ns), Cursor: cursor, Count: 100})
		if err != nil {
			h.Log(abi.LogWarn, "workers of "+ns+": "+err.Error())
			return nil, false
		}
		if len(page.Members) > 0 {
			ops := make([]abi.ReadOp, len(page.Members))
			for i, w := range page.Members {
				ops[i] = abi.ReadOp{Cmd: "HGET", Key: model.WorkerCapsKey(ns, w), Args: []string{"caps_csv"}}
			}
			out, err := h.ReadBatch(ops)
			if err != nil {
				return nil, false
			}
			for _, r := range out {
				if r.Err != "" {
					return nil, false
				}
				v, _ := r.Value()
				for _, t := range csv(v, false) {
					union[t] = true
				}
			}
		}
		if cursor = page.Cursor; cursor == "0" {
			break
		}
	}
	capsCache[ns] = struct {
		at   int64
		caps map[string]bool
	}{u.now, union}
	return union, true
}
