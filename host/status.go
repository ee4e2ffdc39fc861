package host

import (
	"errors"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// State is where a plugin is in its life.
type State string

// Plugin states.
const (
	// StateRunning: serving on its cadence.
	StateRunning State = "running"
	// StateQuarantined: its last call trapped, timed out or returned bad
	// output; it is retried after a backoff while every other plugin keeps
	// its cadence.
	StateQuarantined State = "quarantined"
	// StateIdle: loaded but not driven (a dispatcher, until the completion
	// listener drives it).
	StateIdle State = "idle"
	// StateDisabled: loaded, disabled by host config.
	StateDisabled State = "disabled"
	// StateStopped: the host stopped.
	StateStopped State = "stopped"
	// StateValid and StateInvalid describe files inspected offline or
	// rejected by the watcher.
	StateValid   State = "valid"
	StateInvalid State = "invalid"
	// StateRejected marks a rejected file in a list of plugins (the admin
	// server's /plugins and /status, `fabric status`, the live view).
	StateRejected State = "rejected"
)

// PluginStatus is a snapshot of one plugin, as `fabric plugins list` shows
// it.
type PluginStatus struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Kind    abi.Kind `json:"kind"`
	ABI     string   `json:"abi"`
	SHA256  string   `json:"sha256"`
	Path    string   `json:"path"`
	State   State    `json:"state"`
	Reason  string   `json:"reason,omitempty"`
	// Released: the plugin needs a backend this host does not run, so
	// its compiled code and instances were released once its manifest was
	// read (it costs no memory; only this status is kept).
	Released   bool      `json:"released,omitempty"`
	IntervalMs uint32    `json:"interval_ms"`
	Partitions int       `json:"partitions"`
	LastRun    time.Time `json:"last_run,omitzero"`
	// LastResult is the last partition call's result; Totals sums all.
	LastResult abi.ScanResult `json:"last_result"`
	Totals     abi.ScanResult `json:"totals"`
	// Calls counts partition scans (a fabric_scan_batch call counts one per
	// partition), Faults the plugin calls that trapped, timed out or
	// returned bad output.
	Calls  int64 `json:"calls"`
	Faults int64 `json:"faults"`
	// HostCalls counts host-function calls, Denied the refused ones;
	// LastDenial says why the latest was refused.
	HostCalls  int64  `json:"host_calls"`
	Denied     int64  `json:"denied"`
	LastDenial string `json:"last_denial,omitempty"`
	// Cycles is the number of sweeps started.
	Cycles          uint64    `json:"cycles"`
	Swaps           int       `json:"swaps"`
	LastSwap        time.Time `json:"last_swap,omitzero"`
	QuarantineUntil time.Time `json:"quarantine_until,omitzero"`
	// Metrics are the plugin's own counters and gauges (pdk Host.Metric):
	// counters summed, gauges their last value. MetricGauges names the
	// gauges among them.
	Metrics      map[string]float64 `json:"metrics,omitempty"`
	MetricGauges []string           `json:"metric_gauges,omitempty"`
	// MetricsDropped counts metrics the plugin reported that were dropped
	// (hostfn.ValidMetricName, hostfn.MaxMetricsPerPlugin).
	MetricsDropped int64 `json:"metrics_dropped,omitempty"`
	// LogLinesDropped and LogBytesDropped count the plugin's log lines
	// dropped over its log budget (hostfn.DefaultLogBytesPerSecond).
	LogLinesDropped int64 `json:"log_lines_dropped,omitempty"`
	LogBytesDropped int64 `json:"log_bytes_dropped,omitempty"`
	// Requested is what the manifest asks for, Granted what the operator
	// granted (Policy.For), Limits what the plugin runs under.
	Requested *abi.Capabilities `json:"requested,omitempty"`
	Granted   *Grant            `json:"granted,omitempty"`
	Limits    *Limits           `json:"limits,omitempty"`
	// Signer is the KeyID of the trusted key that signed the file ("":
	// unsigned).
	Signer string `json:"signer,omitempty"`
	// Fault labels the fault that quarantined the plugin (FaultKind: trap,
	// plugin error, timeout, over memory, over output, over budget, bad
	// output); FaultKinds counts every fault by label.
	Fault      string           `json:"fault,omitempty"`
	FaultKinds map[string]int64 `json:"fault_kinds,omitempty"`
	// Commands counts the backend commands of its host calls; OverBudget
	// the host calls refused for its budget (abi.CodeBudget).
	Commands   int64 `json:"commands"`
	OverBudget int64 `json:"over_budget"`
	// Shadow is the candidate version running beside this one (nil:
	// none); Previous the version and sha256 a promotion replaced, kept
	// for a rollback ("": none). See shadow.go.
	Shadow   *ShadowStatus `json:"shadow,omitempty"`
	Previous string        `json:"previous,omitempty"`
	// Instances counts the instances the serving version holds: warm in
	// its pool plus calls in flight; 0 once released idle (its next call
	// instantiates afresh). IdleReleaseMs is how long an idle instance is
	// kept (Config.IdleRelease; 0: pinned warm), IdleReleases how many
	// were released.
	Instances     int   `json:"instances"`
	IdleReleaseMs int64 `json:"idle_release_ms"`
	IdleReleases  int64 `json:"idle_releases"`
}

// FileStatus is the outcome of the latest load of one file.
type FileStatus struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256,omitempty"`
	Plugin string `json:"plugin,omitempty"`
	State  State  `json:"state"`
	Error  string `json:"error,omitempty"`
	// Reason labels why an invalid file was rejected (RejectReason).
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// CycleRecord is one partition call of one sweep: which version served it,
// when, and under which partition lease. Tests assert cadence, hot-swap
// exactness and the exclusivity of partition leases from these.
type CycleRecord struct {
	Plugin    string         `json:"plugin"`
	Version   string         `json:"version"`
	SHA256    string         `json:"sha256"`
	Partition int            `json:"partition"`
	Cycle     uint64         `json:"cycle"`
	Start     time.Time      `json:"start"`
	End       time.Time      `json:"end"`
	Result    abi.ScanResult `json:"result"`
	Error     string         `json:"error,omitempty"`
	// Host and Token are the id of the host that made the call and the
	// fencing token of the partition lease it held ("" and 0 with
	// partition leases off).
	Host  string `json:"host,omitempty"`
	Token int64  `json:"token,omitempty"`
	// Wait is how long the call waited for its turn (the scheduler of
	// fair.go) before Start; Probation, that it ran on probation (the
	// plugin's previous call faulted), behind every healthy call.
	Wait      time.Duration `json:"wait_ns,omitempty"`
	Probation bool          `json:"probation,omitempty"`
}

// recordRing keeps the last max records. Its buffer grows with the
// records added, up to max: a plugin that never runs (disabled, on the
// other backend) or runs rarely holds only what it recorded, not max
// records. A record is kept without the strings every record of one
// plugin version shares (keptRecord): 136 bytes, not 192 (at the default
// 4096 records, 0.53 MiB a busy plugin, not 0.75).
type recordRing struct {
	buf  []keptRecord
	max  int
	next int
	full bool
	// last is the identity of the latest record, shared by the next ones
	// while it is the same.
	last *recordIdentity
}

// recordIdentity is what consecutive records of one plugin share.
type recordIdentity struct {
	plugin, version, sha256, host string
}

// keptRecord is a CycleRecord as the ring keeps it.
type keptRecord struct {
	id         *recordIdentity
	partition  int
	cycle      uint64
	start, end time.Time
	result     abi.ScanResult
	err        string
	token      int64
	wait       time.Duration
	probation  bool
}

func (r *recordRing) add(rec CycleRecord) {
	if r.max <= 0 {
		return
	}
	id := recordIdentity{plugin: rec.Plugin, version: rec.Version, sha256: rec.SHA256, host: rec.Host}
	if r.last == nil || *r.last != id {
		r.last = &id
	}
	k := keptRecord{id: r.last, partition: rec.Partition, cycle: rec.Cycle, start: rec.Start, end: rec.End,
		result: rec.Result, err: rec.Error, token: rec.Token, wait: rec.Wait, probation: rec.Probation}
	if !r.full && len(r.buf) < r.max {
		if len(r.buf) == cap(r.buf) {
			// doubling, never past max
			r.buf = append(make([]keptRecord, 0, min(r.max, max(16, 2*cap(r.buf)))), r.buf...)
		}
		r.buf = append(r.buf, k)
		if len(r.buf) == r.max {
			r.full = true
		}
		return
	}
	r.buf[r.next] = k
	r.next = (r.next + 1) % len(r.buf)
}

func (r *recordRing) snapshot() []CycleRecord {
	out := make([]CycleRecord, 0, len(r.buf))
	add := func(ks []keptRecord) {
		for _, k := range ks {
			out = append(out, CycleRecord{Plugin: k.id.plugin, Version: k.id.version, SHA256: k.id.sha256,
				Partition: k.partition, Cycle: k.cycle, Start: k.start, End: k.end, Result: k.result, Error: k.err,
				Host: k.id.host, Token: k.token, Wait: k.wait, Probation: k.probation})
		}
	}
	if !r.full {
		add(r.buf)
		return out
	}
	add(r.buf[r.next:])
	add(r.buf[:r.next])
	return out
}

// Reasons a file is rejected, as RejectReason returns them.
const (
	RejectNotWasm        = "not wasm"
	RejectTruncated      = "truncated"
	RejectMissingExport  = "missing export"
	RejectUnknownImport  = "unknown import"
	RejectABIMismatch    = "abi mismatch"
	RejectBadManifest    = "bad manifest"
	RejectDigestMismatch = "digest mismatch"
	RejectNotGranted     = "not granted"
	RejectUnsigned       = "unsigned"
	RejectBadSignature   = "bad signature"
	RejectTooLarge       = "too large"
	RejectNameMismatch   = "name mismatch"
	RejectDowngrade      = "downgrade"
	RejectNotRegular     = "not a regular file"
	RejectFault          = "fault at load"
	// RejectNotInterruptible: the host cannot add its deadline checks to
	// the module (ErrNotInterruptible).
	RejectNotInterruptible = "not interruptible"
	RejectOther            = "other"
)

// RejectReason labels why loading a file failed: not wasm, truncated,
// missing export, unknown import, abi mismatch, bad manifest, digest
// mismatch, not granted (it requests more than its grant), unsigned, bad
// signature, too large, name mismatch (its file is not NAME.wasm for its
// plugin NAME), downgrade (signed and older than the version the host
// has run), not a regular file (a FIFO, device, socket or directory, or
// a symlink to one), fault at load (its manifest call trapped, timed
// out or returned bad output), not interruptible (ErrNotInterruptible) or
// other.
func RejectReason(err error) string {
	switch {
	case errors.Is(err, ErrNotWasm):
		return RejectNotWasm
	case errors.Is(err, ErrTruncated):
		return RejectTruncated
	case errors.Is(err, ErrMissingExport):
		return RejectMissingExport
	case errors.Is(err, ErrUnknownImport):
		return RejectUnknownImport
	case errors.Is(err, abi.ErrVersionMismatch):
		return RejectABIMismatch
	case errors.Is(err, abi.ErrInvalidManifest):
		return RejectBadManifest
	case errors.Is(err, ErrDigestMismatch):
		return RejectDigestMismatch
	case errors.Is(err, ErrNotGranted):
		return RejectNotGranted
	case errors.Is(err, ErrUnsigned):
		return RejectUnsigned
	case errors.Is(err, ErrBadSignature):
		return RejectBadSignature
	case errors.Is(err, errTooLarge):
		return RejectTooLarge
	case errors.Is(err, ErrNameMismatch):
		return RejectNameMismatch
	case errors.Is(err, ErrDowngrade):
		return RejectDowngrade
	case errors.Is(err, ErrNotRegular):
		return RejectNotRegular
	case errors.Is(err, ErrNotInterruptible):
		return RejectNotInterruptible
	case FaultKind(err) != "":
		return RejectFault
	}
	return RejectOther
}

// Rejected returns the files whose latest load failed, by path; a file
// leaves the list when it is removed or a fixed version loads.
func (h *Host) Rejected() []FileStatus {
	var out []FileStatus
	for _, f := range h.Files() {
		if f.State == StateInvalid {
			out = append(out, f)
		}
	}
	return out
}
