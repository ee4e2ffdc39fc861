package host

import (
	"sort"
	"unsafe"
)

// PluginResident is what one loaded plugin version holds resident in the
// host process (Host.Resident): a diagnostic for the bench and operators.
type PluginResident struct {
	Plugin string `json:"plugin"`
	// CodeBytes: resident pages of its machine code in this process (code
	// shared by two versions of one file counts for each).
	CodeBytes int64 `json:"code_bytes"`
	// CodeMapped: the size of its machine code.
	CodeMapped int64 `json:"code_mapped"`
	// MemoryBytes: resident pages of its idle instances' linear memories;
	// Instances counts those instances (calls in flight hold others).
	MemoryBytes int64 `json:"memory_bytes"`
	Instances   int   `json:"instances"`
}

// Resident reports, per loaded plugin, the resident share of its machine
// code and of its idle instances' linear memories, sorted by name. The
// Go heap a plugin's decoded module keeps is not told apart (see
// BENCHMARKS.md, scenario 7). Linux only; elsewhere the byte counts are 0.
func (h *Host) Resident() []PluginResident {
	h.mu.Lock()
	mods := make(map[string]*Module, len(h.plugins))
	for name, p := range h.plugins {
		if m := p.mod.Load(); m != nil {
			mods[name] = m
		}
	}
	h.mu.Unlock()
	rss := mappingRss()
	out := make([]PluginResident, 0, len(mods))
	for name, m := range mods {
		r := PluginResident{Plugin: name}
		liveCode.mu.Lock()
		if u := liveCode.uses[m.codeKey]; u != nil && m.codeKey != 0 {
			r.CodeMapped = int64(len(u.code))
			r.CodeBytes = rss[uintptr(unsafe.Pointer(unsafe.SliceData(u.code)))]
		}
		liveCode.mu.Unlock()
		m.mu.Lock()
		if !m.closed {
			for _, inst := range m.pool {
				r.Instances++
				r.MemoryBytes += inst.mem.resident()
			}
		}
		m.mu.Unlock()
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Plugin < out[j].Plugin })
	return out
}
