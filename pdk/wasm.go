//go:build wasip1

package pdk

import "github.com/fabric-host/fabric/abi"

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

//go:wasmimport fabric:host/v1 partition
func hostPartition(index uint32) int32

type marshaler interface{ MarshalBinary() ([]byte, error) }
type unmarshaler interface{ UnmarshalBinary([]byte) error }

// keepBelow is the size under which a kernel-memory block is not freed
// after a host call: the host resets kernel memory at the start of every
// plugin call, and each free is a call into the Extism kernel that costs
// more than the memory it returns.
const keepBelow = 4 << 10

// sendBlock copies b into kernel memory and returns it with its sized
// pointer (abi.SizedPtr). The block is padded to a multiple of 8 bytes:
// whole words are copied with one cheap call each but every byte of a
// ragged tail with a call into the Extism kernel.
func sendBlock(b []byte) (kernelBlock, uint64) {
	n := len(b)
	if tail := abi.PadTo8(n) - n; tail > 0 {
		b = append(b[:n:n], make([]byte, tail)...)
	}
	m := allocBytes(b)
	return m, abi.SizedPtr(m.offset, n)
}

// freeLarge frees m when it is worth a kernel call.
func freeLarge(m kernelBlock) {
	if m.length >= keepBelow {
		m.free()
	}
}

// receiveBlock reads the block a host function returned: sized when the
// request was (ABI 1.2), else looked up in the kernel.
func receiveBlock(v uint64) []byte {
	off, n, sized := abi.SplitPtr(v)
	if !sized {
		m := findBlock(off)
		b := m.bytes()
		freeLarge(m)
		return b
	}
	// The host pads a sized result to a multiple of 8 bytes: read whole
	// words only.
	m := kernelBlock{offset: off, length: uint64(abi.PadTo8(int(n)))}
	b := m.bytes()
	freeLarge(m)
	return b[:n]
}

// roundTrip sends req through fn and decodes the envelope into resp.
func roundTrip(fn func(uint64) uint64, req marshaler, resp unmarshaler) error {
	b, err := req.MarshalBinary()
	if err != nil {
		return err
	}
	collectIfGrown()
	in, ptr := sendBlock(b)
	out := fn(ptr)
	freeLarge(in)
	body, err := abi.OpenEnvelope(receiveBlock(out))
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
	m, ptr := sendBlock([]byte(msg))
	hostLog(int32(level), ptr)
	freeLarge(m)
}

func (wasmHost) Metric(m abi.Metric) {
	b, _ := m.MarshalBinary()
	mem, ptr := sendBlock(b)
	hostMetric(ptr)
	freeLarge(mem)
}

// configValue is one cached answer of the host's config.
type configValue struct {
	v  string
	ok bool
}

// configCache holds the config values read so far. A plugin instance's
// config is fixed when the host instantiates it (a new config means a new
// instance), so each key is asked of the host once per instance.
var configCache = map[string]configValue{}

func (wasmHost) Config(key string) (string, bool) {
	if c, ok := configCache[key]; ok {
		return c.v, c.ok
	}
	v, ok := extismConfig(key)
	configCache[key] = configValue{v, ok}
	return v, ok
}

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
		extismSetError(ErrNotRegistered)
		return 1
	}
	b, err := registered.ManifestBytes()
	if err != nil {
		extismSetError(err)
		return 1
	}
	extismOutput(b)
	return 0
}

//go:wasmexport fabric_scan
func exportScan() int32 {
	if registered == nil {
		extismSetError(ErrNotRegistered)
		return 1
	}
	out, err := registered.HandleScan(wasmHost{}, extismInput())
	if err != nil {
		extismSetError(err)
		return 1
	}
	extismOutput(out)
	return 0
}

//go:wasmexport fabric_scan_batch
func exportScanBatch() int32 {
	if registered == nil {
		extismSetError(ErrNotRegistered)
		return 1
	}
	out, err := registered.HandleScanBatch(wasmHost{}, extismInput(), selectPartition)
	if err != nil {
		extismSetError(err)
		return 1
	}
	extismOutput(out)
	return 0
}

// selectPartition asks the host to check the following host calls
// against partition index of the batch (abi.PartitionWholeBatch: all of them).
func selectPartition(index uint32) error {
	if rc := hostPartition(index); rc != 0 {
		return abi.Errorf(abi.Code(-rc), "partition not in the batch")
	}
	return nil
}

//go:wasmexport fabric_dispatch
func exportDispatch() int32 {
	if registered == nil {
		extismSetError(ErrNotRegistered)
		return 1
	}
	out, err := registered.HandleDispatch(wasmHost{}, extismInput())
	if err != nil {
		extismSetError(err)
		return 1
	}
	extismOutput(out)
	return 0
}
