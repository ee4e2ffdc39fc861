package abi

// Namespace is the wasm import module of fabric's host functions. Its
// suffix is the ABI major, so a plugin of another major fails to link
// rather than misread a message.
const Namespace = "fabric:host/v1"

// ValueType is a wasm value type of a host-function parameter or result.
type ValueType uint8

// Value types. PTR is an i64 offset of an Extism kernel memory block,
// optionally sized (see SizedPtr).
const (
	I32 ValueType = iota
	I64
	PTR
)

// SizedPtr packs a kernel-memory block's offset (always below 4 GiB) and
// its length into one PTR value, the length in the upper 32 bits (ABI
// 1.2). The host reads a sized argument without asking the Extism kernel
// for the block's length, and answers a call whose argument was sized
// with a sized result whose block is allocated to PadTo8(length) bytes
// (zero after length), so the guest can copy it in whole words; an
// unsized argument (upper bits zero, as plugins of ABI 1.0 and 1.1 send)
// gets an unsized result. Each kernel lookup saved is a call into the
// kernel module, which costs microseconds.
func SizedPtr(offset uint64, length int) uint64 {
	return offset&0xffff_ffff | uint64(uint32(length))<<32
}

// PadTo8 rounds n up to a multiple of 8.
func PadTo8(n int) int { return (n + 7) &^ 7 }

// SplitPtr undoes SizedPtr: sized is false when v carries no length (then
// length is 0 and the block's length must be looked up).
func SplitPtr(v uint64) (offset uint64, length uint32, sized bool) {
	length = uint32(v >> 32)
	return v & 0xffff_ffff, length, length != 0
}

// HostFunc describes one host function. HostFuncs is the table; the host
// registers exactly these, and the pdk imports exactly these.
type HostFunc struct {
	// Name is the import name within Namespace.
	Name string
	// Params and Results are the wasm signature.
	Params, Results []ValueType
	// Capability is the grant every call is checked against before
	// dispatch.
	Capability Capability
	// Request and Response name the messages a PTR carries ("" when the
	// function takes or returns plain values).
	Request, Response string
	// Summary says what it does.
	Summary string
}

// Host function names.
const (
	FnFCall         = "fcall"
	FnHMGet         = "hmget"
	FnZRangeByScore = "zrangebyscore"
	FnSMembers      = "smembers"
	FnSScan         = "sscan"
	FnNow           = "now"
	FnLog           = "log"
	FnMetric        = "metric"
	FnSQLQuery      = "sql_query"
	FnRead          = "read"
	FnWrite         = "write"
	FnReadBatch     = "read_batch"
	FnPartition     = "partition"
)

// HostFuncs is the table of host functions of this ABI version.
var HostFuncs = []HostFunc{
	{Name: FnFCall, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapFCall,
		Request: "FCallRequest", Response: "FCallResponse",
		Summary: "run one or more FCALLs in one pipelined round trip; each call's function must be granted; calls carrying an item key go through the plugin's failure tracker"},
	{Name: FnHMGet, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapRead,
		Request: "HMGetRequest", Response: "HMGetResponse", Summary: "HMGET key field..."},
	{Name: FnZRangeByScore, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapRead,
		Request: "ZRangeRequest", Response: "Members", Summary: "ZRANGEBYSCORE key min max [WITHSCORES] LIMIT offset count (count is mandatory)"},
	{Name: FnSMembers, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapRead,
		Request: "KeyRequest", Response: "Members", Summary: "SMEMBERS key"},
	{Name: FnSScan, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapRead,
		Request: "ScanCursorRequest", Response: "ScanCursorResponse", Summary: "SSCAN key cursor [MATCH pattern] COUNT n"},
	{Name: FnNow, Results: []ValueType{I64}, Capability: CapNone,
		Summary: "server time in milliseconds; a negative value is the negated Code of a failure"},
	{Name: FnLog, Params: []ValueType{I32, PTR}, Capability: CapNone,
		Summary: "log a message at a LogLevel through the host's logger, tagged with the plugin name"},
	{Name: FnMetric, Params: []ValueType{PTR}, Capability: CapNone,
		Request: "Metric", Summary: "add to a per-plugin counter or set a gauge"},
	{Name: FnSQLQuery, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapSQL,
		Request: "SQLRequest", Response: "SQLResponse",
		Summary: "run named statements of the host's SQL catalog (model/pgsql) with bound parameters: a batch in one transaction, or begin/exec/commit of the call's own transaction, rolled back if the call ends with it open"},
	// ABI 1.1: the flow-engine plugins' reads and writes.
	{Name: FnRead, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapRead,
		Request: "CommandRequest", Response: "Members",
		Summary: "one allow-listed read on one key: SRANDMEMBER key n, SCARD, EXISTS, HGETALL (flat pairs), GET (no element when nil)"},
	{Name: FnWrite, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapWrite,
		Request: "CommandRequest", Response: "Count",
		Summary: "one allow-listed plain write on one key (HSET, HDEL, SREM, ZREM, DEL, SET, ZREMRANGEBYSCORE); the key must match capabilities.write"},
	// ABI 1.1: the execution scanners' pre-reads.
	{Name: FnReadBatch, Params: []ValueType{PTR}, Results: []ValueType{PTR}, Capability: CapRead,
		Request: "BatchReadRequest", Response: "BatchReadResponse",
		Summary: "run a batch of read-only commands (abi.BatchReadCommands: one key each, and a SORT_RO's GET/BY patterns on its hash tag) in one pipelined round trip; every key and pattern must be granted"},
	// ABI 1.2: several partitions per call.
	{Name: FnPartition, Params: []ValueType{I32}, Results: []ValueType{I32}, Capability: CapNone,
		Summary: "select the partition (its index) that the following host calls of a fabric_scan_batch call act for, or PartitionWholeBatch for all of them at once; 0, or the negated Code when it is not one of the batch's"},
}

// LookupHostFunc returns the table entry of name.
func LookupHostFunc(name string) (HostFunc, bool) {
	for _, f := range HostFuncs {
		if f.Name == name {
			return f, true
		}
	}
	return HostFunc{}, false
}

// LogLevel is the level argument of the log host function.
type LogLevel int32

// Log levels, matching slog's numeric levels.
const (
	LogDebug LogLevel = -4
	LogInfo  LogLevel = 0
	LogWarn  LogLevel = 4
	LogError LogLevel = 8
)

// Guest exports every plugin must provide, besides the WASI reactor's
// _initialize.
const (
	ExportManifest = "fabric_manifest"
	ExportScan     = "fabric_scan"
)

// RequiredExports lists the exports the host checks before compiling.
var RequiredExports = []string{"_initialize", ExportManifest, ExportScan}

// readOnlyFunctions are the Valkey Functions (FlowFabric's and fabric's)
// that change nothing: every other ff_* and fabric_* function writes.
var readOnlyFunctions = map[string]bool{
	"ff_version": true, "fabric_version": true,
	"ff_read_attempt_stream": true, "ff_read_summary": true, "ff_list_waitpoint_hmac_kids": true,
}

// Mutates reports whether the Valkey Function name may change the
// keyspace: all but the few read-only ones (an unknown name counts as a
// write). A shadow run records the calls of those, never sends them.
func Mutates(function string) bool { return !readOnlyFunctions[function] }
