// Package pdktest is an in-process fake of the fabric host for plugin unit
// tests: in-memory hashes, sets and sorted sets, scripted Functions, a
// fixed clock, and the same capability checks the real host applies, so a
// plugin's logic runs natively, fast and deterministically.
//
//	h := pdktest.New(t, plugin.Manifest)
//	h.ZAdd(keys.LaneDelayed("default"), 100, id)
//	h.Handle("ff_promote_delayed", func(keys, args []string) abi.CallResult { ... })
//	res := h.Scan(plugin, model.Partition{Index: 0})
//
// # Notes
//
//   - A refused call returns the same *abi.Error the host would and is
//     recorded in Denied.
//   - Not safe for concurrent use.
package pdktest

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Func is a scripted Valkey Function.
type Func func(keys, args []string) abi.CallResult

// LogLine is one line a plugin logged.
type LogLine struct {
	Level abi.LogLevel
	Msg   string
}

// Host is the fake host. Its exported fields are the test's to set and
// read.
type Host struct {
	tb       testing.TB
	manifest abi.Manifest
	tag      string
	// batch: the tags of a ScanBatch whose whole batch is selected (each
	// key must be on one of them).
	batch []string

	// NowMs is what Now returns.
	NowMs int64
	// ConfigValues overrides the manifest's Config.
	ConfigValues map[string]string
	// Calls are every FCALL the plugin ran (granted ones only).
	Calls []abi.Call
	// Denied are the refusals returned to the plugin.
	Denied []error
	// Logs are the plugin's log lines.
	Logs []LogLine
	// Metrics are counters and gauges by name.
	Metrics map[string]float64
	// Tracker, when set, returns true for items to report StatusSkipped.
	Tracker func(item string) bool
	// Reads are every read-batch op the plugin ran (granted ones only).
	Reads []abi.ReadOp
	// ReadErr, when set, returns a non-empty error message for ops that
	// must fail.
	ReadErr func(op abi.ReadOp) string

	funcs  map[string]Func
	zsets  map[string]map[string]float64
	hashes map[string]map[string]string
	sets   map[string]map[string]struct{}
	strs   map[string]string
}

var _ pdk.Host = (*Host)(nil)

// New returns a fake host enforcing m's capabilities (after defaults).
// tb receives fatal errors; nil (in Example functions) panics instead.
func New(tb testing.TB, m abi.Manifest) *Host {
	if m.ABI == "" {
		m.ABI = abi.Version
	}
	m.ApplyDefaults()
	return &Host{
		tb: tb, manifest: m, NowMs: 1_000_000,
		ConfigValues: map[string]string{}, Metrics: map[string]float64{},
		funcs: map[string]Func{}, zsets: map[string]map[string]float64{},
		hashes: map[string]map[string]string{}, sets: map[string]map[string]struct{}{},
	}
}

// Handle scripts Function fn.
func (h *Host) Handle(fn string, f Func) { h.funcs[fn] = f }

// ZAdd adds member with score to a sorted set.
func (h *Host) ZAdd(key string, score float64, member string) {
	z := h.zsets[key]
	if z == nil {
		z = map[string]float64{}
		h.zsets[key] = z
	}
	z[member] = score
}

// ZRem removes member from a sorted set.
func (h *Host) ZRem(key, member string) { delete(h.zsets[key], member) }

// ZScore returns member's score and whether it is present.
func (h *Host) ZScore(key, member string) (float64, bool) {
	s, ok := h.zsets[key][member]
	return s, ok
}

// HSet sets field/value pairs of a hash.
func (h *Host) HSet(key string, kv ...string) {
	m := h.hashes[key]
	if m == nil {
		m = map[string]string{}
		h.hashes[key] = m
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
}

// HGet returns a hash field.
func (h *Host) HGet(key, field string) string { return h.hashes[key][field] }

// SAdd adds members to a set.
func (h *Host) SAdd(key string, members ...string) {
	s := h.sets[key]
	if s == nil {
		s = map[string]struct{}{}
		h.sets[key] = s
	}
	for _, m := range members {
		s[m] = struct{}{}
	}
}

// Scan runs p on partition part through the binary codec, as the host
// would, and returns the decoded result. The partition's count is the
// family default.
func (h *Host) Scan(p pdk.Plugin, part model.Partition, cycle uint64) abi.ScanResult {
	h.tag = part.Tag()
	req := abi.ScanRequest{Cycle: cycle, Partition: part, Partitions: model.DefaultFlowPartitions, BatchSize: h.manifest.BatchSize, DeadlineMs: h.manifest.TimeoutMs}
	in, err := req.MarshalBinary()
	if err != nil {
		h.fatalf("pdktest: encode scan request: %v", err)
	}
	out, err := p.HandleScan(h, in)
	if err != nil {
		h.fatalf("pdktest: scan: %v", err)
	}
	var res abi.ScanResult
	if err := res.UnmarshalBinary(out); err != nil {
		h.fatalf("pdktest: decode scan result: %v", err)
	}
	return res
}

// ScanBatch runs p on partitions parts as one fabric_scan_batch call,
// through the binary codec, as the host would (the whole batch selectable
// at once, abi.PartitionWholeBatch), and returns the decoded results.
func (h *Host) ScanBatch(p pdk.Plugin, parts []model.Partition, cycle uint64) []abi.ScanResult {
	req := abi.ScanBatchRequest{Cycle: cycle, Family: parts[0].Family, Partitions: model.DefaultFlowPartitions,
		BatchSize: h.manifest.BatchSize, DeadlineMs: h.manifest.TimeoutMs}
	tags := map[uint16]string{}
	for _, part := range parts {
		req.Indexes = append(req.Indexes, part.Index)
		tags[part.Index] = part.Tag()
	}
	in, err := req.MarshalBinary()
	if err != nil {
		h.fatalf("pdktest: encode scan batch request: %v", err)
	}
	defer func() { h.tag, h.batch = "", nil }()
	out, err := p.HandleScanBatch(h, in, func(index uint32) error {
		if index == abi.PartitionWholeBatch {
			h.batch = h.batch[:0]
			for _, t := range tags {
				h.batch = append(h.batch, t)
			}
			return nil
		}
		t, ok := tags[uint16(index)]
		if !ok || index > 0xffff {
			return abi.Errorf(abi.CodeCrossPartition, "partition not in the batch")
		}
		h.tag, h.batch = t, nil
		return nil
	})
	if err != nil {
		h.fatalf("pdktest: scan batch: %v", err)
	}
	var res abi.ScanBatchResult
	if err := res.UnmarshalBinary(out); err != nil {
		h.fatalf("pdktest: decode scan batch result: %v", err)
	}
	return res.Results
}

// onPartition checks that key is on the selected partition (or, with a
// whole batch selected, on one of its partitions).
func (h *Host) onPartition(key string) error {
	tag := h.tag
	if h.batch != nil {
		tag = abi.HashTag(key)
		if !slices.Contains(h.batch, tag) {
			tag = h.batch[0]
		}
	}
	if tag == "" {
		return nil
	}
	if err := h.manifest.Capabilities.AllowKeyOnPartition(key, tag); err != nil {
		return h.deny(err)
	}
	return nil
}

func (h *Host) fatalf(format string, args ...any) {
	if h.tb == nil {
		panic(fmt.Sprintf(format, args...))
	}
	h.tb.Helper()
	h.tb.Fatalf(format, args...)
}

func (h *Host) deny(err error) error {
	h.Denied = append(h.Denied, err)
	return err
}

func (h *Host) checkRead(key string) error {
	if err := h.manifest.Capabilities.AllowRead(key); err != nil {
		return h.deny(err)
	}
	if !abi.IsGlobalReadKey(key) {
		return h.onPartition(key)
	}
	return nil
}

// FCall implements pdk.Host.
func (h *Host) FCall(calls []abi.Call) ([]abi.CallResult, error) {
	for _, c := range calls {
		if err := h.manifest.Capabilities.AllowFCall(c.Function); err != nil {
			return nil, h.deny(err)
		}
		for _, k := range c.Keys {
			if err := h.onPartition(k); err != nil {
				return nil, err
			}
		}
	}
	out := make([]abi.CallResult, len(calls))
	for i, c := range calls {
		if c.Item != "" && h.Tracker != nil && h.Tracker(c.Item) {
			out[i] = abi.CallResult{Result: abi.StatusSkipped}
			continue
		}
		h.Calls = append(h.Calls, c)
		f := h.funcs[c.Function]
		if f == nil {
			out[i] = abi.CallResult{Result: abi.StatusError, Status: "ERR Function not found: " + c.Function}
			continue
		}
		out[i] = f(c.Keys, c.Args)
	}
	return out, nil
}

// HMGet implements pdk.Host.
func (h *Host) HMGet(key string, fields ...string) ([]abi.Field, error) {
	if err := h.checkRead(key); err != nil {
		return nil, err
	}
	out := make([]abi.Field, len(fields))
	m := h.hashes[key]
	for i, f := range fields {
		v, ok := m[f]
		out[i] = abi.Field{Value: v, Present: ok}
	}
	return out, nil
}

// parseBound parses a ZRANGEBYSCORE bound.
func parseBound(s string) (v float64, exclusive bool, err error) {
	if s != "" && s[0] == '(' {
		exclusive, s = true, s[1:]
	}
	switch s {
	case "-inf":
		return -1e308, exclusive, nil
	case "+inf", "inf":
		return 1e308, exclusive, nil
	}
	v, err = strconv.ParseFloat(s, 64)
	return v, exclusive, err
}

// ZRangeByScore implements pdk.Host.
func (h *Host) ZRangeByScore(req abi.ZRangeRequest) (abi.Members, error) {
	if err := h.checkRead(req.Key); err != nil {
		return abi.Members{}, err
	}
	lo, loEx, err1 := parseBound(req.Min)
	hi, hiEx, err2 := parseBound(req.Max)
	if err1 != nil || err2 != nil || req.Count == 0 {
		return abi.Members{}, abi.Errorf(abi.CodeBadRequest, fmt.Sprintf("zrangebyscore %s %s count %d", req.Min, req.Max, req.Count))
	}
	type kv struct {
		m string
		s float64
	}
	var all []kv
	for m, s := range h.zsets[req.Key] {
		if (s > lo || (!loEx && s == lo)) && (s < hi || (!hiEx && s == hi)) {
			all = append(all, kv{m, s})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].s != all[j].s {
			return all[i].s < all[j].s
		}
		return all[i].m < all[j].m
	})
	var out abi.Members
	for i := int(req.Offset); i < len(all) && len(out.Members) < int(req.Count); i++ {
		out.Members = append(out.Members, all[i].m)
		if req.WithScores {
			out.Scores = append(out.Scores, all[i].s)
		}
	}
	return out, nil
}

// SMembers implements pdk.Host.
func (h *Host) SMembers(key string) ([]string, error) {
	if err := h.checkRead(key); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(h.sets[key]))
	for m := range h.sets[key] {
		out = append(out, m)
	}
	slices.Sort(out)
	return out, nil
}

// SScan implements pdk.Host; it returns the whole matching set in one page.
func (h *Host) SScan(req abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	all, err := h.SMembers(req.Key)
	if err != nil {
		return abi.ScanCursorResponse{}, err
	}
	out := abi.ScanCursorResponse{Cursor: "0"}
	for _, m := range all {
		if ok, _ := path.Match(req.Match, m); req.Match == "" || ok {
			out.Members = append(out.Members, m)
		}
	}
	return out, nil
}

// Now implements pdk.Host.
func (h *Host) Now() (int64, error) { return h.NowMs, nil }

// Log implements pdk.Host.
func (h *Host) Log(level abi.LogLevel, msg string) {
	h.Logs = append(h.Logs, LogLine{Level: level, Msg: msg})
}

// Metric implements pdk.Host.
func (h *Host) Metric(m abi.Metric) {
	if m.Kind == abi.MetricGauge {
		h.Metrics[m.Name] = m.Value
	} else {
		h.Metrics[m.Name] += m.Value
	}
}

// Config implements pdk.Host.
func (h *Host) Config(key string) (string, bool) {
	if v, ok := h.ConfigValues[key]; ok {
		return v, true
	}
	v, ok := h.manifest.Config[key]
	return v, ok
}

// ReadBatch implements pdk.Host over the in-memory data: GET, HGET, HMGET,
// HGETALL, EXISTS, ZSCORE, ZCARD, ZCOUNT, SCARD, SISMEMBER, SMEMBERS and
// ZRANGE key 0 -1 or ZRANGE key min max BYSCORE [LIMIT off n] [WITHSCORES].
func (h *Host) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	for _, o := range ops {
		if !abi.ValidBatchReadCommand(o.Cmd) {
			return nil, abi.Errorf(abi.CodeBadRequest, "read: command "+o.Cmd)
		}
		if err := h.checkRead(o.Key); err != nil {
			return nil, err
		}
		for _, p := range o.Patterns() {
			if t := abi.HashTag(p); t == "" || t != abi.HashTag(o.Key) {
				return nil, abi.Errorf(abi.CodeBadRequest, "read: "+o.Cmd+" pattern "+p+" is not on the hash tag of "+o.Key)
			}
			if err := h.checkRead(p); err != nil {
				return nil, err
			}
		}
	}
	h.Reads = append(h.Reads, ops...)
	out := make([]abi.ReadResult, len(ops))
	for i, o := range ops {
		r := &out[i]
		add := func(v string, ok bool) { r.Values = append(r.Values, v); r.Present = append(r.Present, ok) }
		if h.ReadErr != nil {
			if msg := h.ReadErr(o); msg != "" {
				r.Err = msg
				continue
			}
		}
		switch o.Cmd {
		case "GET":
			v, ok := h.strs[o.Key]
			add(v, ok)
		case "HGET", "HMGET":
			for _, f := range o.Args {
				v, ok := h.hashes[o.Key][f]
				add(v, ok)
			}
		case "HGETALL":
			keys := make([]string, 0, len(h.hashes[o.Key]))
			for k := range h.hashes[o.Key] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				add(k, true)
				add(h.hashes[o.Key][k], true)
			}
		case "EXISTS":
			_, a := h.strs[o.Key]
			_, b := h.hashes[o.Key]
			_, c := h.zsets[o.Key]
			_, d := h.sets[o.Key]
			n := 0
			if a || b || c || d {
				n = 1
			}
			add(strconv.Itoa(n), true)
		case "ZSCORE":
			s, ok := h.zsets[o.Key][o.Args[0]]
			add(strconv.FormatFloat(s, 'f', -1, 64), ok)
		case "ZCARD":
			add(strconv.Itoa(len(h.zsets[o.Key])), true)
		case "ZCOUNT":
			lo, loEx, _ := parseBound(o.Args[0])
			hi, hiEx, _ := parseBound(o.Args[1])
			n := 0
			for _, s := range h.zsets[o.Key] {
				if (s > lo || (!loEx && s == lo)) && (s < hi || (!hiEx && s == hi)) {
					n++
				}
			}
			add(strconv.Itoa(n), true)
		case "SCARD":
			add(strconv.Itoa(len(h.sets[o.Key])), true)
		case "SISMEMBER":
			_, ok := h.sets[o.Key][o.Args[0]]
			n := "0"
			if ok {
				n = "1"
			}
			add(n, true)
		case "SMEMBERS":
			ms, _ := h.SMembers(o.Key)
			for _, m := range ms {
				add(m, true)
			}
		case "SORT_RO": // BY nosort and GETs only: members in SMembers order
			ms, _ := h.SMembers(o.Key)
			for _, m := range ms {
				for i := 0; i+1 < len(o.Args); i += 2 {
					if !strings.EqualFold(o.Args[i], "GET") {
						continue
					}
					pat := o.Args[i+1]
					if pat == "#" {
						add(m, true)
						continue
					}
					key, field, isHash := strings.Cut(pat, "->")
					key = strings.Replace(key, "*", m, 1)
					if isHash {
						v, ok := h.hashes[key][field]
						add(v, ok)
					} else {
						v, ok := h.strs[key]
						add(v, ok)
					}
				}
			}
		case "ZRANGE":
			req := abi.ZRangeRequest{Key: o.Key, Min: "-inf", Max: "+inf", Count: 1 << 30}
			if slices.Contains(o.Args, "BYSCORE") && len(o.Args) >= 2 {
				req.Min, req.Max = o.Args[0], o.Args[1]
				req.WithScores = slices.Contains(o.Args, "WITHSCORES")
				if i := slices.Index(o.Args, "LIMIT"); i >= 0 && i+2 < len(o.Args) {
					off, _ := strconv.ParseUint(o.Args[i+1], 10, 32)
					n, _ := strconv.ParseUint(o.Args[i+2], 10, 32)
					req.Offset, req.Count = uint32(off), uint32(n)
				}
			}
			m, err := h.ZRangeByScore(req)
			if err != nil {
				r.Err = err.Error()
				continue
			}
			for j, v := range m.Members {
				add(v, true)
				if req.WithScores {
					add(strconv.FormatFloat(m.Scores[j], 'f', -1, 64), true)
				}
			}
		}
	}
	return out, nil
}
