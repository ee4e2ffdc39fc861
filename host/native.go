package host

import (
	"context"
	"log/slog"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
)

// NativeHost is pdk.Host over a Valkey deployment, without wasm and without
// capability checks: it lets trusted Go code run the plugins' shared logic
// (pdk/flowlib: the router cascade, sibling-cancel dispatch) so the native
// path and the plugins cannot drift. Now is the server's TIME.
//
//	st := flowlib.Cascade(host.NewNativeHost(ctx, client, log), client.Partitions(), eid, flow.String(), now)
//
// # Notes
//
//   - Not safe for concurrent use (like every pdk.Host); make one per
//     goroutine. Each call uses ctx.
type NativeHost struct {
	ctx    context.Context
	store  nativeStore
	c      Backend
	log    *slog.Logger
	config map[string]string
}

// nativeStore is the plugin data a NativeHost serves: every host
// function's store (backend/valkey.PluginStore).
type nativeStore interface {
	hostfn.Store
	hostfn.CommandStore
	hostfn.BatchReadStore
}

// NewNativeHost returns a NativeHost on c (a *valkey.Client); logger nil
// means slog.Default().
func NewNativeHost(ctx context.Context, c Backend, logger *slog.Logger) *NativeHost {
	if logger == nil {
		logger = slog.Default()
	}
	st, _ := hostfn.StoreOf(c).(nativeStore)
	return &NativeHost{ctx: ctx, store: st, c: c, log: logger, config: map[string]string{}}
}

// FCall implements pdk.Host (pipelined; no failure tracker).
func (n *NativeHost) FCall(calls []abi.Call) ([]abi.CallResult, error) {
	return n.store.FCallBatch(n.ctx, calls), nil
}

// HMGet implements pdk.Host.
func (n *NativeHost) HMGet(key string, fields ...string) ([]abi.Field, error) {
	return n.store.HMGet(n.ctx, key, fields)
}

// ZRangeByScore implements pdk.Host.
func (n *NativeHost) ZRangeByScore(req abi.ZRangeRequest) (abi.Members, error) {
	return n.store.ZRangeByScore(n.ctx, req)
}

// SMembers implements pdk.Host.
func (n *NativeHost) SMembers(key string) ([]string, error) { return n.store.SMembers(n.ctx, key) }

// SScan implements pdk.Host.
func (n *NativeHost) SScan(req abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	return n.store.SScan(n.ctx, req)
}

// Now implements pdk.Host with the server's TIME.
func (n *NativeHost) Now() (int64, error) { return n.c.ServerTime(n.ctx) }

// Log implements pdk.Host.
func (n *NativeHost) Log(level abi.LogLevel, msg string) {
	n.log.Log(n.ctx, slog.Level(level), msg, "source", "native")
}

// Metric implements pdk.Host (dropped: native callers have their own
// metrics).
func (n *NativeHost) Metric(abi.Metric) {}

// Config implements pdk.Host.
func (n *NativeHost) Config(key string) (string, bool) {
	v, ok := n.config[key]
	return v, ok
}

// Read implements pdk.Host.
func (n *NativeHost) Read(op, key string, args ...string) ([]string, error) {
	req := abi.ReadRequest(op, key, args...)
	if err := req.Validate(); err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, err.Error())
	}
	return n.store.Read(n.ctx, req)
}

// Write implements pdk.Host.
func (n *NativeHost) Write(op, key string, args ...string) (int64, error) {
	req := abi.WriteRequest(op, key, args...)
	if err := req.Validate(); err != nil {
		return 0, abi.Errorf(abi.CodeBadRequest, err.Error())
	}
	return n.store.Write(n.ctx, req)
}

// ReadBatch implements pdk.Host.
func (n *NativeHost) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	return n.store.ReadBatch(n.ctx, ops), nil
}
