package pdk

import (
	"errors"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/errtext"
)

// Host is what a plugin may ask of the fabric host. Each method maps to one
// host function of abi.HostFuncs; a refused or failed call returns an
// *abi.Error whose Code says why (errors.Is(err, abi.CodeDenied)).
//
// # Notes
//
//   - Not safe for concurrent use; a plugin runs one call at a time.
type Host interface {
	// FCall runs calls as one pipelined batch and returns one result per
	// call, in order. A call whose Item is in failure-tracker backoff comes
	// back abi.StatusSkipped without running.
	FCall(calls []abi.Call) ([]abi.CallResult, error)
	// HMGet reads fields of a hash.
	HMGet(key string, fields ...string) ([]abi.Field, error)
	// ZRangeByScore walks a sorted set by score with a mandatory LIMIT.
	ZRangeByScore(req abi.ZRangeRequest) (abi.Members, error)
	// SMembers reads a whole set.
	SMembers(key string) ([]string, error)
	// SScan reads one page of a set walk.
	SScan(req abi.ScanCursorRequest) (abi.ScanCursorResponse, error)
	// Now returns the server's time in milliseconds.
	Now() (int64, error)
	// Log writes a line to the host's log, tagged with the plugin's name.
	Log(level abi.LogLevel, msg string)
	// Metric adds to a counter or sets a gauge of the plugin.
	Metric(m abi.Metric)
	// Config returns a configuration value: the host's override, else the
	// manifest's default.
	Config(key string) (string, bool)
	// Read runs one allow-listed read (abi.ReadSRandMember, ...) on key;
	// see the typed helpers SRandMember, SCard, Exists, HGetAll, Get.
	Read(op, key string, args ...string) ([]string, error)
	// Write runs one allow-listed write (abi.WriteHSet, ...) on key and
	// returns its integer reply.
	Write(op, key string, args ...string) (int64, error)
	// ReadBatch runs read-only commands (abi.BatchReadCommands: one key
	// each, plus a SORT_RO's patterns on its hash tag) in one pipelined
	// round trip and returns one
	// result per op; a failed command sets that result's Err, a refused
	// batch returns an error.
	ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error)
}

// DispatchFunc handles one batch of completions (a dispatcher's entry
// point) and reports what it did.
type DispatchFunc func(h Host, req abi.DispatchRequest) abi.ScanResult

// ScanFunc scans one partition once and reports what it did. Failures are
// folded into the counts, as in FlowFabric's scanners.
type ScanFunc func(h Host, req abi.ScanRequest) abi.ScanResult

// ScanBatchFunc scans the partitions of one fabric_scan_batch call
// together — its host calls may touch any of them, so one pipelined batch
// serves all — and returns one result per partition, in req.Indexes
// order (see DueBatch).
type ScanBatchFunc func(h Host, req abi.ScanBatchRequest) []abi.ScanResult

// Plugin is what a plugin main package registers.
type Plugin struct {
	// Manifest is the plugin's manifest. An empty ABI means abi.Version.
	Manifest abi.Manifest
	// Scan is the scanner entry point (a dispatcher's sweep, if any).
	Scan ScanFunc
	// ScanBatch, when set, scans the partitions of a fabric_scan_batch
	// call at once instead of Scan once per partition (a host without
	// abi.PartitionWholeBatch gets the Scan loop).
	ScanBatch ScanBatchFunc
	// Dispatch is the dispatcher entry point (abi.KindDispatcher).
	Dispatch DispatchFunc
}

var registered *Plugin

// Register installs p as this module's plugin; call it once from init.
//
// # Notes
//
//   - Panics when called twice, or with neither Scan nor Dispatch: both
//     are wiring mistakes, not runtime conditions.
func Register(p Plugin) {
	if registered != nil {
		panic("pdk: Register called twice")
	}
	if p.Scan == nil && p.Dispatch == nil {
		panic("pdk: Register: Plugin.Scan and Plugin.Dispatch are nil")
	}
	if p.Manifest.ABI == "" {
		p.Manifest.ABI = abi.Version
	}
	registered = &p
}

// Registered returns the registered plugin, or nil.
func Registered() *Plugin { return registered }

// ErrNotRegistered is returned when an export runs before Register.
var ErrNotRegistered = errors.New("pdk: no plugin registered (call pdk.Register from init)")

// ManifestBytes encodes p's manifest as the fabric_manifest export returns
// it.
func (p *Plugin) ManifestBytes() ([]byte, error) {
	m := p.Manifest
	if m.ABI == "" {
		m.ABI = abi.Version
	}
	return m.MarshalBinary()
}

// HandleScan decodes a fabric_scan input, runs p.Scan against h and
// encodes the result. The wasm export and pdktest both go through it, so a
// native test exercises the same codec as the host.
func (p *Plugin) HandleScan(h Host, input []byte) ([]byte, error) {
	var req abi.ScanRequest
	if err := req.UnmarshalBinary(input); err != nil {
		return nil, errtext.Wrap(err, "pdk: fabric_scan input: "+err.Error())
	}
	var res abi.ScanResult
	if p.Scan != nil {
		res = p.Scan(h, req)
	}
	return res.MarshalBinary()
}

// HandleScanBatch decodes a fabric_scan_batch input and runs it against
// h: with p.ScanBatch and more than one partition, once over the whole
// batch after selectPartition(abi.PartitionWholeBatch); else (or when the
// host refuses that selection) p.Scan once per partition of the batch, in
// order, each after selectPartition with the partition's index (the wasm
// export asks the host to move its checks there); a partition that cannot
// be selected is reported as one Error and not scanned.
func (p *Plugin) HandleScanBatch(h Host, input []byte, selectPartition func(index uint32) error) ([]byte, error) {
	var req abi.ScanBatchRequest
	if err := req.UnmarshalBinary(input); err != nil {
		return nil, errtext.Wrap(err, "pdk: fabric_scan_batch input: "+err.Error())
	}
	out := abi.ScanBatchResult{Results: make([]abi.ScanResult, len(req.Indexes))}
	if p.ScanBatch != nil && len(req.Indexes) > 1 && selectPartition(abi.PartitionWholeBatch) == nil {
		copy(out.Results, p.ScanBatch(h, req))
		return out.MarshalBinary()
	}
	for i, idx := range req.Indexes {
		if err := selectPartition(uint32(idx)); err != nil {
			h.Log(abi.LogWarn, "select partition "+errtext.U(idx)+": "+err.Error())
			out.Results[i].Errors++
			continue
		}
		if p.Scan != nil {
			out.Results[i] = p.Scan(h, req.Request(i))
		}
	}
	return out.MarshalBinary()
}

// HandleDispatch decodes a fabric_dispatch input, runs p.Dispatch against
// h and encodes the result; a plugin without Dispatch acts on nothing.
func (p *Plugin) HandleDispatch(h Host, input []byte) ([]byte, error) {
	var req abi.DispatchRequest
	if err := req.UnmarshalBinary(input); err != nil {
		return nil, errtext.Wrap(err, "pdk: fabric_dispatch input: "+err.Error())
	}
	var res abi.ScanResult
	if p.Dispatch != nil {
		res = p.Dispatch(h, req)
	}
	return res.MarshalBinary()
}
