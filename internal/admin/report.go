package admin

import (
	"path/filepath"
	"time"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/census"
)

// Report is the state of a running deployment, as the live view of
// `fabric run` draws it and `fabric status` prints it: the host's plugins
// and the keyspace census.
type Report struct {
	// At is when the report was assembled.
	At time.Time `json:"at"`
	// Backend says where the deployment lives.
	Backend string `json:"backend,omitempty"`
	// Plugins are the host's plugins, by name (none without a host),
	// then a row in state "rejected" per rejected file (RejectedRows).
	Plugins []host.PluginStatus `json:"plugins"`
	// Rejected are the files the host refused to load, by path.
	Rejected []host.FileStatus `json:"rejected,omitempty"`
	// Census is the latest keyspace census (nil before the first).
	Census *census.Census `json:"census,omitempty"`
	// Throughput is executions reaching a terminal state per second.
	Throughput float64 `json:"throughput"`
	// Error is the latest census failure ("" when it succeeded).
	Error string `json:"error,omitempty"`
	// PluginsUnknown, when set, says why Plugins is empty although a host
	// may run some: no host was asked or none answered (`fabric status`
	// reading a database or keyspace directly). Empty: Plugins is what
	// the host reported.
	PluginsUnknown string `json:"plugins_unknown,omitempty"`
}

// BuildReport assembles a report from src's plugins and s's latest
// census; either may be nil.
func BuildReport(at time.Time, backend string, src PluginSource, s *Sampler) Report {
	r := Report{At: at, Backend: backend, Plugins: []host.PluginStatus{}}
	if src != nil {
		r.Plugins = src.Plugins()
		if rs, ok := src.(RejectedSource); ok {
			r.Rejected = rs.Rejected()
			r.Plugins = append(r.Plugins, RejectedRows(r.Rejected)...)
		}
	}
	if s != nil {
		var err error
		r.Census, r.Throughput, err = s.Latest()
		if err != nil {
			r.Error = err.Error()
		}
	}
	return r
}

// RejectedSource is a PluginSource that also lists the files it refused
// to load; *host.Host implements it.
type RejectedSource interface {
	Rejected() []host.FileStatus
}

// RejectedRows turns rejected files into plugin rows: named by file, in
// state "rejected", the reason and error in Reason.
func RejectedRows(files []host.FileStatus) []host.PluginStatus {
	out := make([]host.PluginStatus, 0, len(files))
	for _, f := range files {
		out = append(out, host.PluginStatus{Name: filepath.Base(f.Path), Path: f.Path, SHA256: f.SHA256,
			State: host.StateRejected, Reason: f.Reason + ": " + f.Error})
	}
	return out
}
