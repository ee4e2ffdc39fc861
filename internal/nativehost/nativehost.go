// Package nativehost runs a pdk plugin's scan natively, as plain Go,
// against the same backend the wasm host gives plugins (hostfn.Store), so
// benchmarks can compare a wasm scanner with the same logic compiled
// natively. It is not a production host: no capabilities, no timeouts,
// no failure tracker.
package nativehost

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Host implements pdk.Host over a hostfn.Store.
//
// # Notes
//
//   - Not safe for concurrent use: Ctx is shared by every call.
type Host struct {
	// Ctx bounds every backend call.
	Ctx context.Context
	// Store is the backend (hostfn.ValkeyStore in benchmarks).
	Store hostfn.Store
	// NowMs returns the plugin's clock.
	NowMs func(ctx context.Context) (int64, error)
	// Values are configuration overrides; the manifest's Config is the
	// fallback.
	Values   map[string]string
	Manifest abi.Manifest
	// Logger receives Log lines (nil discards).
	Logger *slog.Logger
}

var _ pdk.Host = (*Host)(nil)

// FCall runs calls as one pipelined batch.
func (h *Host) FCall(calls []abi.Call) ([]abi.CallResult, error) {
	vc := make([]valkey.Call, len(calls))
	for i, c := range calls {
		vc[i] = valkey.Call{Function: c.Function, Keys: c.Keys, Args: c.Args}
	}
	res := h.Store.FCallBatch(h.Ctx, vc)
	out := make([]abi.CallResult, len(res))
	for i, r := range res {
		out[i] = callResult(r)
	}
	return out, nil
}

func callResult(r valkey.Result) abi.CallResult {
	var le *valkey.LuaError
	switch {
	case r.Err == nil && r.Reply != nil:
		return abi.CallResult{Result: abi.StatusOK, Status: r.Reply.Status, Fields: r.Reply.Fields}
	case errors.As(r.Err, &le):
		return abi.CallResult{Result: abi.StatusLuaError, Status: string(le.Code), Fields: le.Details}
	case r.Err != nil:
		return abi.CallResult{Result: abi.StatusError, Status: r.Err.Error()}
	}
	return abi.CallResult{Result: abi.StatusError, Status: "empty reply"}
}

// HMGet reads fields of a hash.
func (h *Host) HMGet(key string, fields ...string) ([]abi.Field, error) {
	return h.Store.HMGet(h.Ctx, key, fields)
}

// ZRangeByScore walks a sorted set by score.
func (h *Host) ZRangeByScore(req abi.ZRangeRequest) (abi.Members, error) {
	return h.Store.ZRangeByScore(h.Ctx, req)
}

// SMembers reads a whole set.
func (h *Host) SMembers(key string) ([]string, error) { return h.Store.SMembers(h.Ctx, key) }

// SScan reads one page of a set walk.
func (h *Host) SScan(req abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	return h.Store.SScan(h.Ctx, req)
}

// Now returns the clock in milliseconds.
func (h *Host) Now() (int64, error) { return h.NowMs(h.Ctx) }

// Log writes to Logger.
func (h *Host) Log(level abi.LogLevel, msg string) {
	if h.Logger != nil {
		h.Logger.Info(msg, "plugin", h.Manifest.Name, "level", level)
	}
}

// Read runs one read op through the store's CommandStore.
func (h *Host) Read(op, key string, args ...string) ([]string, error) {
	cs, ok := h.Store.(hostfn.CommandStore)
	if !ok {
		return nil, errNoCommands
	}
	req := abi.ReadRequest(op, key, args...)
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return cs.Read(h.Ctx, req)
}

// Write runs one write op through the store's CommandStore.
func (h *Host) Write(op, key string, args ...string) (int64, error) {
	cs, ok := h.Store.(hostfn.CommandStore)
	if !ok {
		return 0, errNoCommands
	}
	req := abi.WriteRequest(op, key, args...)
	if err := req.Validate(); err != nil {
		return 0, err
	}
	return cs.Write(h.Ctx, req)
}

// ReadBatch runs a pipelined read batch through the store's
// BatchReadStore.
func (h *Host) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	rs, ok := h.Store.(hostfn.BatchReadStore)
	if !ok {
		return nil, errNoCommands
	}
	return rs.ReadBatch(h.Ctx, ops), nil
}

var errNoCommands = errors.New("nativehost: the store does not serve read/write commands")

// Metric is discarded.
func (h *Host) Metric(abi.Metric) {}

// Config returns an override, else the manifest's default.
func (h *Host) Config(key string) (string, bool) {
	if v, ok := h.Values[key]; ok {
		return v, true
	}
	v, ok := h.Manifest.Config[key]
	return v, ok
}

// Cycle runs p over partitions 0..n-1 of its family once, as the host's
// scanner loop does, and returns the summed result.
func (h *Host) Cycle(p pdk.Plugin, n int, cycle uint64) abi.ScanResult {
	fam := p.Manifest.PartitionFamily()
	var sum abi.ScanResult
	for i := 0; i < n; i++ {
		req := abi.ScanRequest{Cycle: cycle, Partition: model.Partition{Family: fam, Index: uint16(i)},
			Partitions: uint16(n), BatchSize: p.Manifest.BatchSize, DeadlineMs: p.Manifest.TimeoutMs}
		sum.Add(p.Scan(h, req))
	}
	return sum
}
