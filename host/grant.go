package host

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fabric-host/fabric/abi"
)

// ErrNotGranted is matched by a plugin refused at load because its
// manifest requests more than the operator granted it.
var ErrNotGranted = errors.New("host: plugin requests more than it was granted")

// Grant is what the operator allows one plugin: the capabilities it may
// use and the resources it may take. A plugin's manifest only requests;
// the host loads it only when every request is within its Grant and runs
// it under the Grant's limits (see Limits).
//
// Capabilities are denied unless listed: a nil FCall grants no function.
// Resource fields that are zero inherit the Policy's Default, whose zero
// fields take the built-in defaults (GrantDefault*).
//
// In fabric.toml a Grant is a [grant] table (the defaults) or a
// [plugins.NAME.grant] table (one plugin), with these keys.
type Grant struct {
	// FCall lists the Valkey Functions the plugin may call, by exact name.
	FCall []string `toml:"fcall" json:"fcall,omitempty"`
	// Read and Write list key-family globs (abi.Capabilities syntax). A
	// requested glob is within the grant when a granted glob matches it as
	// text (so "ff:*" covers "ff:exec:*:core").
	Read  []string `toml:"read" json:"read,omitempty"`
	Write []string `toml:"write" json:"write,omitempty"`
	// SQL lists named statements and "table.<name>" entries.
	SQL []string `toml:"sql" json:"sql,omitempty"`
	// CrossPartition allows keys of other partitions than the scanned one.
	CrossPartition bool `toml:"cross_partition" json:"cross_partition,omitempty"`
	// MaxPages is the ceiling of the plugin's linear memory in 64 KiB
	// pages (abi.MaxMaxPages at most).
	MaxPages uint32 `toml:"max_pages" json:"max_pages,omitempty"`
	// TimeoutMs is the ceiling of one call, in milliseconds: of its CPU
	// time with a wall cap of 8× once the plugin returned, else of wall
	// time (see callContext).
	TimeoutMs uint32 `toml:"timeout_ms" json:"timeout_ms,omitempty"`
	// MaxOutputBytes caps one call's result.
	MaxOutputBytes int `toml:"max_output_bytes" json:"max_output_bytes,omitempty"`
	// HostCallsPerSweep and HostCallsPerSecond budget host-function calls;
	// CommandsPerSweep and CommandsPerSecond budget backend commands (an
	// FCALL batch of n functions is n commands). Negative: not limited.
	HostCallsPerSweep  int64 `toml:"host_calls_per_sweep" json:"host_calls_per_sweep,omitempty"`
	HostCallsPerSecond int64 `toml:"host_calls_per_second" json:"host_calls_per_second,omitempty"`
	CommandsPerSweep   int64 `toml:"commands_per_sweep" json:"commands_per_sweep,omitempty"`
	CommandsPerSecond  int64 `toml:"commands_per_second" json:"commands_per_second,omitempty"`
	// SHA256 and Signers bind a plugin's grant to the files it is for: a
	// file whose sha256 (hex) is one of SHA256, or that carries a valid
	// signature by a trusted key whose KeyID is one of Signers (AnySigner:
	// any trusted key). A file matching neither gets the Default grant
	// alone (see Policy.ForFile). Both empty: the grant is not bound and
	// applies to whatever file declares the plugin's name. Ignored in the
	// [grant] defaults.
	SHA256  []string `toml:"sha256" json:"sha256,omitempty"`
	Signers []string `toml:"signers" json:"signers,omitempty"`
}

// AnySigner in Grant.Signers binds a grant to a signature by any key the
// host trusts (Config.TrustedKeys).
const AnySigner = "*"

// The built-in resource defaults of a Grant whose field, and the Policy
// Default's, is zero.
const (
	GrantDefaultMaxPages       = abi.DefaultMaxPages  // 64 MiB
	GrantDefaultTimeoutMs      = abi.DefaultTimeoutMs // 5 s
	GrantDefaultMaxOutputBytes = HostMaxOutputBytesDefault
	// GrantDefaultHostCallsPerSecond and GrantDefaultCommandsPerSecond are
	// far above what the stock set makes (a few hundred host calls a
	// sweep) and low enough to stop a plugin flooding the host within a
	// fraction of a second.
	GrantDefaultHostCallsPerSecond = 50_000
	GrantDefaultCommandsPerSecond  = 1_000_000
	// GrantDefaultPerSweep (both per-sweep budgets) is negative: not
	// limited until the operator sets one (sweeps differ by orders of
	// magnitude with the partition count).
	GrantDefaultPerSweep = -1
)

// Limits are the resources a plugin runs with: its Grant's ceilings
// resolved against the manifest's request and the host's overrides. The
// host enforces them (memory at compile, the timeout per call, output
// size per call, budgets per sweep and per second).
type Limits struct {
	// MaxPages is the plugin's memory cap in 64 KiB pages.
	MaxPages uint32 `json:"max_pages"`
	// Timeout bounds one call (see Grant.TimeoutMs).
	Timeout time.Duration `json:"timeout_ns"`
	// MaxOutputBytes caps one call's result.
	MaxOutputBytes int `json:"max_output_bytes"`
	// Budgets; negative is not limited (never zero once resolved).
	HostCallsPerSweep  int64 `json:"host_calls_per_sweep"`
	HostCallsPerSecond int64 `json:"host_calls_per_second"`
	CommandsPerSweep   int64 `json:"commands_per_sweep"`
	CommandsPerSecond  int64 `json:"commands_per_second"`
}

// Policy is the operator's grants: Default applies to every plugin (its
// capabilities are added to every plugin's, its resources fill the zero
// ones), Plugins by manifest name. A plugin absent from Plugins is granted
// Default alone, which by default grants no capability.
type Policy struct {
	Default Grant            `toml:"grant" json:"default"`
	Plugins map[string]Grant `json:"plugins"`
}

//go:embed grants_stock.toml
var stockGrantsTOML []byte

// StockPolicy returns the built-in policy: the stock plugins' grants
// (host/grants_stock.toml, exactly what each stock manifest requests) and
// the built-in resource defaults. `fabric run` starts from it and lays
// fabric.toml's [grant] and [plugins.NAME.grant] tables over it.
func StockPolicy() Policy {
	var f struct {
		Plugins map[string]struct {
			Grant Grant `toml:"grant"`
		} `toml:"plugins"`
	}
	md, err := toml.NewDecoder(bytes.NewReader(stockGrantsTOML)).Decode(&f)
	if err != nil || len(md.Undecoded()) > 0 {
		panic(fmt.Sprintf("host: grants_stock.toml: %v %v", err, md.Undecoded()))
	}
	p := Policy{Plugins: make(map[string]Grant, len(f.Plugins))}
	for name, e := range f.Plugins {
		p.Plugins[name] = e.Grant
	}
	return p
}

// BindStock returns p with every grant of a stock plugin's name
// (StockPolicy's table) that names no files bound to a signature by a
// trusted key (AnySigner): those grants then apply only to files signed
// by a key the host trusts, never to another file declaring a stock
// plugin's name. `fabric run` binds StockPolicy's grants before laying
// the operator's tables over them (a table of the operator's replaces
// the stock one, bound only as it says); StockPolicy itself, as embedders
// and tests use it, is not bound.
func (p Policy) BindStock() Policy {
	stock := StockPolicy()
	out := Policy{Default: p.Default, Plugins: make(map[string]Grant, len(p.Plugins))}
	for name, g := range p.Plugins {
		if _, ok := stock.Plugins[name]; ok && !g.bound() {
			g.Signers = []string{AnySigner}
		}
		out.Plugins[name] = g
	}
	return out
}

// bound reports whether g applies only to files it names (SHA256, Signers).
func (g *Grant) bound() bool { return len(g.SHA256)+len(g.Signers) > 0 }

// admits reports whether a bound grant applies to a file of digest
// (hex sha256) carrying a valid signature by the trusted key signer
// (KeyID; "" for none, or a key the host does not trust).
func (g *Grant) admits(digest, signer string) bool {
	if slices.Contains(g.SHA256, digest) {
		return true
	}
	return signer != "" && (slices.Contains(g.Signers, AnySigner) || slices.Contains(g.Signers, signer))
}

// binding says which files a bound grant applies to.
func (g *Grant) binding() string {
	var parts []string
	if len(g.SHA256) > 0 {
		parts = append(parts, "sha256 "+strings.Join(g.SHA256, ", "))
	}
	switch {
	case slices.Contains(g.Signers, AnySigner):
		parts = append(parts, "a signature by a trusted key")
	case len(g.Signers) > 0:
		parts = append(parts, "a signature by trusted key "+strings.Join(g.Signers, ", "))
	}
	return strings.Join(parts, " or ")
}

// ForFile returns the grant of plugin name for one file of it: For(name)
// when that grant is not bound or admits the file (its sha256 digest, the
// KeyID signer of its trusted signature, "" when it has none), else the
// Default grant alone, with withheld saying why ("" when granted).
func (p *Policy) ForFile(name, digest, signer string) (g Grant, withheld string) {
	own := p.Plugins[name]
	if !own.bound() || own.admits(digest, signer) {
		return p.For(name), ""
	}
	what := "unsigned"
	if signer != "" {
		what = "signed by key " + signer
	}
	return p.resolve(Grant{}), fmt.Sprintf("the grant of %s applies only to a file with %s; this one is %s, sha256 %s", name, own.binding(), what, digest)
}

// For returns the grant of plugin name: its own grant plus the Default's
// capabilities, its zero resources filled from Default then the built-in
// defaults. A bound grant (SHA256, Signers) is returned whatever file it
// is for: see ForFile.
func (p *Policy) For(name string) Grant {
	return p.resolve(p.Plugins[name])
}

// resolve lays the Default grant and the built-in defaults under g.
func (p *Policy) resolve(g Grant) Grant {
	d := p.Default
	g.FCall = union(d.FCall, g.FCall)
	g.Read = union(d.Read, g.Read)
	g.Write = union(d.Write, g.Write)
	g.SQL = union(d.SQL, g.SQL)
	g.CrossPartition = g.CrossPartition || d.CrossPartition
	g.HostCallsPerSweep = firstNonZero(g.HostCallsPerSweep, d.HostCallsPerSweep, GrantDefaultPerSweep)
	g.HostCallsPerSecond = firstNonZero(g.HostCallsPerSecond, d.HostCallsPerSecond, GrantDefaultHostCallsPerSecond)
	g.CommandsPerSweep = firstNonZero(g.CommandsPerSweep, d.CommandsPerSweep, GrantDefaultPerSweep)
	g.CommandsPerSecond = firstNonZero(g.CommandsPerSecond, d.CommandsPerSecond, GrantDefaultCommandsPerSecond)
	g.MaxPages = firstNonZero(g.MaxPages, d.MaxPages, GrantDefaultMaxPages)
	g.TimeoutMs = firstNonZero(g.TimeoutMs, d.TimeoutMs, GrantDefaultTimeoutMs)
	g.MaxOutputBytes = firstNonZero(g.MaxOutputBytes, d.MaxOutputBytes, GrantDefaultMaxOutputBytes)
	return g
}

// Validate checks a policy's values (operator input).
func (p *Policy) Validate() error {
	if err := p.Default.validate("grant"); err != nil {
		return err
	}
	for name, g := range p.Plugins {
		if err := g.validate("plugins." + name + ".grant"); err != nil {
			return err
		}
	}
	return nil
}

func (g *Grant) validate(where string) error {
	for _, d := range g.SHA256 {
		if len(d) != 64 || strings.Trim(d, "0123456789abcdef") != "" {
			return fmt.Errorf("host: %s: sha256 %q: want 64 lowercase hex digits", where, d)
		}
	}
	for _, k := range g.Signers {
		if k != AnySigner && (len(k) != 16 || strings.Trim(k, "0123456789abcdef") != "") {
			return fmt.Errorf("host: %s: signers %q: want a key id (16 hex digits, as `fabric plugins keygen` prints) or %q", where, k, AnySigner)
		}
	}
	m := abi.Manifest{ABI: abi.Version, Name: "grant", Version: "0.0.0", Capabilities: abi.Capabilities{
		FCall: g.FCall, Read: g.Read, Write: g.Write, SQL: g.SQL,
	}}
	m.ApplyDefaults()
	if err := m.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), abi.ErrInvalidManifest.Error()+": ")
		return fmt.Errorf("host: %s: %s", where, msg)
	}
	if g.MaxPages > abi.MaxMaxPages {
		return fmt.Errorf("host: %s: max_pages %d: at most %d", where, g.MaxPages, abi.MaxMaxPages)
	}
	if g.TimeoutMs > abi.MaxTimeoutMs {
		return fmt.Errorf("host: %s: timeout_ms %d: at most %d", where, g.TimeoutMs, abi.MaxTimeoutMs)
	}
	if g.MaxOutputBytes < 0 {
		return fmt.Errorf("host: %s: max_output_bytes %d is negative", where, g.MaxOutputBytes)
	}
	return nil
}

// Check returns nil when every request of manifest m is within g, else
// an error matching ErrNotGranted that lists every difference, e.g.
// "fcall ff_cancel_execution not granted; write ff:* not granted;
// max_pages 16384 > granted 1024". g is a grant as For returns it.
func (g *Grant) Check(m abi.Manifest) error {
	var diff []string
	c := m.Capabilities
	for _, f := range c.FCall {
		if !slices.Contains(g.FCall, f) {
			diff = append(diff, "fcall "+f+" not granted")
		}
	}
	for _, r := range c.Read {
		if !globCovered(g.Read, r) {
			diff = append(diff, "read "+r+" not granted")
		}
	}
	for _, w := range c.Write {
		if !globCovered(g.Write, w) {
			diff = append(diff, "write "+w+" not granted")
		}
	}
	for _, s := range c.SQL {
		if !slices.Contains(g.SQL, s) {
			diff = append(diff, "sql "+s+" not granted")
		}
	}
	if c.CrossPartition && !g.CrossPartition {
		diff = append(diff, "cross_partition not granted")
	}
	if m.MaxPages > g.MaxPages {
		diff = append(diff, fmt.Sprintf("max_pages %d > granted %d", m.MaxPages, g.MaxPages))
	}
	if m.TimeoutMs > g.TimeoutMs {
		diff = append(diff, fmt.Sprintf("timeout_ms %d > granted %d", m.TimeoutMs, g.TimeoutMs))
	}
	if len(diff) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrNotGranted, m.Name, strings.Join(diff, "; "))
}

// Limits resolves the resources a plugin granted g runs with, given its
// effective manifest m (host overrides applied): memory as requested
// (Check keeps it within g), the call timeout capped by g, output and
// budgets from g.
func (g *Grant) Limits(m abi.Manifest) Limits {
	return Limits{
		MaxPages:           min(m.MaxPages, g.MaxPages),
		Timeout:            time.Duration(min(m.TimeoutMs, g.TimeoutMs)) * time.Millisecond,
		MaxOutputBytes:     g.MaxOutputBytes,
		HostCallsPerSweep:  g.HostCallsPerSweep,
		HostCallsPerSecond: g.HostCallsPerSecond,
		CommandsPerSweep:   g.CommandsPerSweep,
		CommandsPerSecond:  g.CommandsPerSecond,
	}
}

// GrantOf returns the grant that allows exactly what manifest m requests
// (what `fabric plugins validate` prints for an operator to paste).
func GrantOf(m abi.Manifest) Grant {
	c := m.Capabilities
	return Grant{FCall: slices.Clone(c.FCall), Read: slices.Clone(c.Read), Write: slices.Clone(c.Write),
		SQL: slices.Clone(c.SQL), CrossPartition: c.CrossPartition, MaxPages: m.MaxPages, TimeoutMs: m.TimeoutMs}
}

// globCovered reports whether a granted glob covers requested glob r:
// equal, or a granted glob made of literals and '*' only matches r's text
// (every key r matches is then matched by it).
func globCovered(granted []string, r string) bool {
	for _, g := range granted {
		if g == r {
			return true
		}
		if strings.ContainsAny(g, `?[\`) {
			continue
		}
		if ok, _ := path.Match(g, r); ok {
			return true
		}
	}
	return false
}

func union(a, b []string) []string {
	if len(a) == 0 {
		return b
	}
	out := slices.Clone(b)
	for _, s := range a {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func firstNonZero[T comparable](vs ...T) T {
	var zero T
	for _, v := range vs {
		if v != zero {
			return v
		}
	}
	return zero
}
