// Package hostfn implements the host functions of abi.HostFuncs as wazero
// Go functions over the call's Extism blocks (package env), one file per
// family (fcall.go, read.go, clock.go, log.go, sql.go).
//
// Every call resolves its caller (plugin, grant, partition) from a typed
// context key, is checked against the grant in one place (authorize) before
// dispatch, and answers with an abi envelope: expected failures are codes,
// never traps. Only ABI violations (a pointer that does not name a kernel
// memory block, a request that is not a well-formed message, a missing
// caller) panic, which wazero turns into a trap of the guest call; what
// the host holds for a request counts against the plugin's memory cap
// (env.Kernel.Hold), and a request over it traps as out of memory.
//
// # Notes
//
//   - Host functions cannot be interrupted by the wasm timeout, so every
//     backend call takes the call's context, which carries the plugin call's
//     deadline.
package hostfn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/env"
)

// ErrMalformedRequest is matched by the trap of a host call whose request
// is not a well-formed message (abi.ErrDecode): a count or length above
// the bytes it holds, garbage. A plugin that sends one is faulty, not
// refused: its call ends (the host reports bad output).
var ErrMalformedRequest = errors.New("hostfn: malformed request")

// Tracker is the failure tracker fcall consults for calls that carry an
// item key.
type Tracker interface {
	ShouldSkip(item string) bool
	RecordSuccess(item string)
	RecordFailure(item string)
}

// Stats are the per-plugin counters host functions update. The zero value
// is ready to use; it is safe for concurrent use.
type Stats struct {
	// HostCalls counts host-function calls, Denied the refused ones.
	HostCalls, Denied atomic.Int64
	// MetricsDropped counts metrics the plugin reported that were
	// dropped (a bad name or value, or too many names: see
	// ValidMetricName).
	MetricsDropped atomic.Int64
	// LogLinesDropped and LogBytesDropped count the plugin's log lines
	// (its own, and the host's about its refused calls) dropped over its
	// log budget (SetLogBudget).
	LogLinesDropped, LogBytesDropped atomic.Int64

	logs       logBucket
	mu         sync.Mutex
	lastDenial string
	metrics    map[string]float64
	gauges     map[string]bool
}

// LastDenial returns the message of the latest refusal.
func (s *Stats) LastDenial() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastDenial
}

// Metrics returns a copy of the plugin's counters and gauges.
func (s *Stats) Metrics() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]float64, len(s.metrics))
	for k, v := range s.metrics {
		out[k] = v
	}
	return out
}

// Gauges returns the names of the plugin's metrics that are gauges, sorted;
// the others are counters.
func (s *Stats) Gauges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, g := range s.gauges {
		if g {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Stats) denied(msg string) {
	s.Denied.Add(1)
	s.mu.Lock()
	s.lastDenial = msg
	s.mu.Unlock()
}

// Caller is who is calling: set on the context of every plugin call.
type Caller struct {
	// Plugin and Version name the plugin.
	Plugin, Version string
	// Caps is the plugin's grant.
	Caps *abi.Capabilities
	// Tag is the hash tag of the partition being scanned ("" when the call
	// is not a partition scan, e.g. reading the manifest).
	Tag string
	// Tracker is the plugin's failure tracker (nil: none).
	Tracker Tracker
	// Stats receives counters.
	Stats *Stats
	// Logger is the plugin's logger.
	Logger *slog.Logger
	// OnNow, when set, is told every server time the plugin reads (the
	// due-time timers convert due scores to host time with it).
	OnNow func(ms int64)
	// OnFCall, when set, is called as an FCALL batch is sent, with the
	// partition tag it is sent for; the func it returns (nil: none) is
	// called once the replies are in (the due-time timers time their
	// stages with it).
	OnFCall func(tag string) (replied func())
	// Batch maps the partition indexes of a fabric_scan_batch call to
	// their hash tags; the partition host function moves Tag among them.
	// Nil outside a batch call.
	Batch map[uint16]string
	// WholeBatch: the plugin selected every partition of Batch at once
	// (abi.PartitionWholeBatch): each key must be on one of them. Tag
	// stays the last single partition selected (the sql check and logs
	// use it).
	WholeBatch bool
	// Budget meters the plugin's host calls and backend commands (nil:
	// unlimited).
	Budget *Budget
	// FixedNow, when positive, is the server time every clock read of
	// the call answers: a shadow and the live call it is compared with
	// read one time (shadow.go).
	FixedNow int64
	// Actions, when set, records the call's writes (shadow.go); with
	// Actions.DryRun they are recorded and not sent (a shadow run).
	Actions *ActionLog

	overBudget atomic.Value // error: the call's first budget refusal
	lateLogs   atomic.Int32 // log lines written over budget
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerFrom returns the caller of ctx; a call without one is a host
// wiring bug, reported as a trap.
func callerFrom(ctx context.Context) *Caller {
	c, ok := ctx.Value(callerKey{}).(*Caller)
	if !ok {
		panic("hostfn: plugin call without a Caller on its context")
	}
	return c
}

// Config configures the host functions.
type Config struct {
	// Store serves plugin data reads and FCALLs (a valkey.PluginStore);
	// nil answers CodeUnavailable
	// (offline inspection).
	Store Store
	// Now returns server time in milliseconds; nil answers CodeUnavailable.
	Now func(ctx context.Context) (int64, error)
	// MaxCalls caps the calls of one fcall batch (default 10000).
	MaxCalls int
	// MaxLogBytes truncates guest log lines (default DefaultMaxLogBytes).
	MaxLogBytes int
	// SQL is the Postgres database sql_query runs on (a
	// postgres.PluginSQL); nil answers CodeUnavailable.
	SQL SQLDB
}

// subjects is what a request asks to touch, for authorize.
type subjects struct {
	functions []string
	reads     []string
	sql       []string
	writes    []string
	keys      []string // every key, for the partition check
	// patterns are the key patterns a read expands (SORT_RO BY and GET):
	// each must be covered by a read glob and on the partition.
	patterns []keyPattern
}

// commands is how many backend commands a request carries, for the
// budget: one per function called, key or key pattern read, key written,
// and statement; at least one.
func (s subjects) commands() int64 {
	return max(1, int64(len(s.functions)+len(s.reads)+len(s.patterns)+len(s.writes)+len(s.sql)))
}

// authorize is the single capability check of every host function: each
// function, key family and statement the request names must be granted,
// and every key must be on the caller's partition. A refusal is counted
// and logged.
func authorize(c *Caller, hf abi.HostFunc, s subjects) error {
	err := func() error {
		if hf.Capability == abi.CapFCall && len(s.functions) == 0 {
			return abi.Errorf(abi.CodeBadRequest, "empty fcall batch")
		}
		for _, f := range s.functions {
			if err := c.Caps.AllowFCall(f); err != nil {
				return err
			}
		}
		for _, k := range s.reads {
			if err := c.Caps.AllowRead(k); err != nil {
				return err
			}
		}
		for _, p := range s.patterns {
			if err := allowReadPattern(c.Caps, p); err != nil {
				return err
			}
		}
		for _, k := range s.writes {
			if err := c.Caps.AllowWrite(k); err != nil {
				return err
			}
		}
		for _, q := range s.sql {
			if err := c.Caps.AllowSQL(q); err != nil {
				return err
			}
		}
		if c.Tag != "" || c.WholeBatch {
			for _, k := range s.keys {
				if hf.Capability == abi.CapRead && abi.IsGlobalReadKey(k) {
					continue // granted above; deployment-wide
				}
				if err := c.Caps.AllowKeyOnPartition(k, c.partitionOf(k)); err != nil {
					return err
				}
			}
			// A pattern's keys are on the tag of its prefix when the tag
			// closes there (readOpSubjects); else on no provable one.
			for _, p := range s.patterns {
				if err := c.Caps.AllowKeyOnPartition(p.Prefix, c.partitionOf(p.Prefix)); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if err != nil {
		c.Stats.denied(err.Error())
		c.logFor(context.Background(), slog.LevelWarn, "plugin host call refused", "plugin", c.Plugin, "function", hf.Name, "partition", c.Tag, "error", err.Error())
	}
	return err
}

// partitionOf is the tag key k must be on: the selected partition's, or
// with the whole batch selected, k's own when it is one of the batch's.
func (c *Caller) partitionOf(k string) string {
	if !c.WholeBatch {
		return c.Tag
	}
	tag := abi.HashTag(k)
	for _, t := range c.Batch {
		if t == tag {
			return tag
		}
	}
	return c.Tag // not one of the batch's: refused unless granted cross_partition
}

// request is the bytes of a host call's request and the memory its
// decoded form may take.
type request struct {
	b []byte
	// room bounds the bytes the decoded form takes (0: no bound); used
	// is what it took.
	room, used int
}

// decode decodes the request into v within its room (abi.DecodeWithin).
func (rq *request) decode(v abi.Request) error {
	n, err := abi.DecodeWithin(v, rq.b, rq.room)
	rq.used += n
	return err
}

// handler is one pointer-in, pointer-out host function: decode the
// request and name its subjects, then run it.
type handler struct {
	decode func(in *request) (req any, s subjects, err error)
	run    func(ctx context.Context, c *Caller, req any) ([]byte, error)
}

func valueTypes(vs []abi.ValueType) []api.ValueType {
	out := make([]api.ValueType, len(vs))
	for i, v := range vs {
		switch v {
		case abi.I32:
			out[i] = api.ValueTypeI32
		case abi.I64, abi.PTR:
			out[i] = api.ValueTypeI64
		}
	}
	return out
}

// callback is one host function over the wazero stack: arguments in,
// results out.
type callback func(ctx context.Context, stack []uint64)

// ptrFunction adapts a handler to the envelope calling convention.
func ptrFunction(hf abi.HostFunc, h handler) callback {
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		k := kernelOf(ctx)
		view, sized, err := blockView(ctx, stack[0])
		if err != nil {
			panic(fmt.Sprintf("hostfn %s: abi violation: request pointer %#x: %v", hf.Name, stack[0], err))
		}
		// The request's copy and its decoded form are the plugin's
		// memory while the call runs, each charged before it is made: the
		// form is decoded within the room the copy leaves.
		held := uint64(len(view))
		if err := k.Hold(held); err != nil {
			panic(fmt.Errorf("hostfn %s: request of %d bytes: %w", hf.Name, len(view), err))
		}
		defer func() { k.Release(held) }()
		in := &request{b: bytes.Clone(view), room: int(min(k.Room(), math.MaxInt32))}
		var out []byte
		req, subj, err := h.decode(in)
		switch {
		case errors.Is(err, abi.ErrDecodeLimit):
			panic(fmt.Errorf("hostfn %s: request of %d bytes: %w: %w", hf.Name, len(view), env.ErrOutOfMemory, err))
		case errors.Is(err, abi.ErrDecode):
			panic(fmt.Errorf("hostfn %s: %w: %w", hf.Name, ErrMalformedRequest, err))
		}
		if herr := k.Hold(uint64(in.used)); herr != nil {
			panic(fmt.Errorf("hostfn %s: request of %d bytes: %w", hf.Name, len(view), herr))
		}
		held += uint64(in.used)
		if berr := c.begin(subj.commands()); berr != nil {
			out = abi.ErrorEnvelope(berr)
			err = berr
		} else if err != nil {
			out = abi.ErrorEnvelope(requestError(err))
		}
		switch {
		case err != nil:
		default:
			if err := authorize(c, hf, subj); err != nil {
				out = abi.ErrorEnvelope(err)
				break
			}
			body, err := h.run(ctx, c, req)
			if err != nil {
				if ctx.Err() != nil {
					err = abi.Errorf(abi.CodeDeadline, err.Error())
				}
				out = abi.ErrorEnvelope(err)
			} else {
				out = abi.AppendEnvelope(make([]byte, 0, len(body)+1), body)
			}
		}
		n := len(out)
		if tail := abi.PadTo8(n) - n; sized && tail > 0 {
			out = append(out, make([]byte, tail)...) // see abi.SizedPtr
		}
		ptr := writeBlock(ctx, out)
		if sized {
			ptr = abi.SizedPtr(ptr, n)
		}
		stack[0] = ptr
	}
}

// requestError is the refusal of a request decode found unfit: its own
// code when it carries one (abi.CodeLimit), else abi.CodeBadRequest.
func requestError(err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return err
	}
	return abi.Errorf(abi.CodeBadRequest, err.Error())
}

// readBlock copies the block a PTR argument names from the call's Extism
// kernel (env.Kernel), as blockView.
func readBlock(ctx context.Context, v uint64) (b []byte, sized bool, err error) {
	view, sized, err := blockView(ctx, v)
	return bytes.Clone(view), sized, err
}

// blockView returns the block a PTR argument names in the call's Extism
// kernel (env.Kernel), a view valid until the kernel's next allocation. A
// sized pointer (abi.SizedPtr) is read directly; an unsized one is looked
// up as a block.
func blockView(ctx context.Context, v uint64) (b []byte, sized bool, err error) {
	k := kernelOf(ctx)
	off, n, sized := abi.SplitPtr(v)
	if !sized {
		n = uint32(k.Length(off)) // 0 when off names no block, as Extism's kernel
		if n == 0 {
			return nil, false, nil
		}
	}
	view, ok := k.Bytes(off, uint64(n))
	if !ok {
		return nil, sized, fmt.Errorf("block of %d bytes at %d is out of kernel memory", n, off)
	}
	return view, sized, nil
}

// writeBlock copies b into a new block of the call's kernel and returns
// its offset. A kernel over its memory limit panics (a trap of the call).
func writeBlock(ctx context.Context, b []byte) uint64 {
	return kernelOf(ctx).Write(b)
}

// kernelOf is the Extism kernel of the call; a call without one is a host
// wiring bug, reported as a trap.
func kernelOf(ctx context.Context) *env.Kernel {
	k := env.FromContext(ctx)
	if k == nil {
		panic("hostfn: plugin call without an Extism kernel on its context")
	}
	return k
}

// HostFunction is one host function of abi.HostFuncs as wazero defines
// it: its import name within abi.Namespace, signature and Go function.
type HostFunction struct {
	Name            string
	Params, Results []api.ValueType
	Fn              api.GoModuleFunc
}

// Functions returns the host functions of abi.HostFuncs, in namespace
// abi.Namespace, backed by cfg.
//
// # Notes
//
//   - Panics when the table names a function this package does not
//     implement: a wiring mistake caught by the first test.
func Functions(cfg Config) []HostFunction {
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = 10000
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	ptrs := map[string]handler{
		abi.FnFCall:         fcallHandler(cfg),
		abi.FnHMGet:         hmgetHandler(cfg),
		abi.FnZRangeByScore: zrangeHandler(cfg),
		abi.FnSMembers:      smembersHandler(cfg),
		abi.FnSScan:         sscanHandler(cfg),
		abi.FnSQLQuery:      sqlHandler(cfg),
		abi.FnReadBatch:     readHandler(cfg),
		abi.FnRead:          commandHandler(cfg, false),
		abi.FnWrite:         commandHandler(cfg, true),
	}
	plain := map[string]callback{
		abi.FnNow:       nowFunction(cfg),
		abi.FnLog:       logFunction(cfg),
		abi.FnMetric:    metricFunction(),
		abi.FnPartition: partitionFunction(),
	}
	out := make([]HostFunction, 0, len(abi.HostFuncs))
	for _, hf := range abi.HostFuncs {
		var cb callback
		if h, ok := ptrs[hf.Name]; ok {
			cb = ptrFunction(hf, h)
		} else if f, ok := plain[hf.Name]; ok {
			cb = f
		} else {
			panic("hostfn: abi.HostFuncs lists " + hf.Name + " but hostfn does not implement it")
		}
		out = append(out, HostFunction{Name: hf.Name, Params: valueTypes(hf.Params), Results: valueTypes(hf.Results),
			Fn: func(ctx context.Context, _ api.Module, stack []uint64) { cb(ctx, stack) }})
	}
	return out
}

var errNoStore = abi.Errorf(abi.CodeUnavailable, "this host has no backend (offline inspection)")
