//go:build wasip1

package pdk

import (
	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
)

// The host functions of abi.HostFuncs, imported from abi.Namespace. Keep
// this list in the table's order.

//go:wasmimport fabric:host/v1 fcall
func hostFCall(req uint64) uint64

//go:wasmimport fabric:host/v1 hmget
func hostHMGet(req uint64) uint64

//go:wasmimport fabric:host/v1 zrangebyscore
func hostZRangeByScore(req uint64) uint64

//go:wasmimport fabric:host/v1 smembers
func hostSMembers(req uint64) uint64

//go:wasmimport fabric:host/v1 sscan
func hostSScan(req uint64) uint64

//go:wasmimport fabric:host/v1 now
func hostNow() int64

//go:wasmimport fabric:host/v1 log
func hostLog(level int32, msg uint64)

//go:wasmimport fabric:host/v1 metric
func hostMetric(req uint64)

//go:wasmimport fabric:host/v1 read
func hostRead(req uint64) uint64

//go:wasmimport fabric:host/v1 write
func hostWrite(req uint64) uint64

//go:wasmimport fabric:host/v1 read_batch
func hostReadBatch(req uint64) uint64

type marshaler interface{ MarshalBinary() ([]byte, error) }
type unmarshaler interface{ UnmarshalBinary([]byte) error }

// roundTrip sends req through fn and decodes the envelope into resp.
func roundTrip(fn func(uint64) uint64, req marshaler, resp unmarshaler) error {
	b, err := req.MarshalBinary()
	if err != nil {
		return err
	}
	in := pdk.AllocateBytes(b)
	outOff := fn(in.Offset())
	in.Free()
	out := pdk.FindMemory(outOff)
	env := out.ReadBytes()
	out.Free()
	body, err := abi.OpenEnvelope(env)
	if err != nil {
		return err
	}
	return resp.UnmarshalBinary(body)
}

// wasmHost is Host over the real host functions.
type wasmHost struct{}

func (wasmHost) FCall(calls []abi.Call) ([]abi.CallResult, error) {
	var resp abi.FCallResponse
	if err := roundTrip(hostFCall, &abi.FCallRequest{Calls: calls}, &resp); err != nil {
		return nil, err
	}
	return resp.Results, nil
}

func (wasmHost) HMGet(key string, fields ...string) ([]abi.Field, error) {
	var resp abi.HMGetResponse
	if err := roundTrip(hostHMGet, &abi.HMGetRequest{Key: key, Fields: fields}, &resp); err != nil {
		return nil, err
	}
	return resp.Values, nil
}

func (wasmHost) ZRangeByScore(req abi.ZRangeRequest) (abi.Members, error) {
	var resp abi.Members
	err := roundTrip(hostZRangeByScore, &req, &resp)
	return resp, err
}

func (wasmHost) SMembers(key string) ([]string, error) {
	var resp abi.Members
	if err := roundTrip(hostSMembers, &abi.KeyRequest{Key: key}, &resp); err != nil {
		return nil, err
	}
	return resp.Members, nil
}

func (wasmHost) SScan(req abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	var resp abi.ScanCursorResponse
	err := roundTrip(hostSScan, &req, &resp)
	return resp, err
}

func (wasmHost) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	var resp abi.BatchReadResponse
	if err := roundTrip(hostReadBatch, &abi.BatchReadRequest{Ops: ops}, &resp); err != nil {
		return nil, err
	}
	return resp.Results, nil
}

func (wasmHost) Now() (int64, error) {
	v := hostNow()
	if v < 0 {
		return 0, abi.Errorf(abi.Code(-v), "now failed")
	}
	return v, nil
}

func (wasmHost) Log(level abi.LogLevel, msg string) {
	m := pdk.AllocateString(msg)
	hostLog(int32(level), m.Offset())
	m.Free()
}

func (wasmHost) Metric(m abi.Metric) {
	b, _ := m.MarshalBinary()
	mem := pdk.AllocateBytes(b)
	hostMetric(mem.Offset())
	mem.Free()
}

func (wasmHost) Config(key string) (string, bool) { return pdk.GetConfig(key) }

func (wasmHost) Read(op, key string, args ...string) ([]string, error) {
	var resp abi.Members
	if err := roundTrip(hostRead, abi.ReadRequest(op, key, args...), &resp); err != nil {
		return nil, err
	}
	return resp.Members, nil
}

func (wasmHost) Write(op, key string, args ...string) (int64, error) {
	var resp abi.Count
	if err := roundTrip(hostWrite, abi.WriteRequest(op, key, args...), &resp); err != nil {
		return 0, err
	}
	return resp.N, nil
}

//go:wasmexport fabric_manifest
func exportManifest() int32 {
	if registered == nil {
		pdk.SetError(ErrNotRegistered)
		return 1
	}
	b, err := registered.ManifestBytes()
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(b)
	return 0
}

//go:wasmexport fabric_scan
func exportScan() int32 {
	if registered == nil {
		pdk.SetError(ErrNotRegistered)
		return 1
	}
	out, err := registered.HandleScan(wasmHost{}, pdk.Input())
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(out)
	return 0
}

//go:wasmexport fabric_dispatch
func exportDispatch() int32 {
	if registered == nil {
		pdk.SetError(ErrNotRegistered)
		return 1
	}
	out, err := registered.HandleDispatch(wasmHost{}, pdk.Input())
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(out)
	return 0
}
