package abi

import (
	"errors"
	"path"
	"slices"

	"github.com/fabric-host/fabric/internal/errtext"
	"github.com/fabric-host/fabric/model"
)

// Kind is what a plugin does, and so how the host drives it.
type Kind string

// Plugin kinds.
const (
	// KindScanner is called once per partition per tick on a cadence.
	KindScanner Kind = "scanner"
	// KindDispatcher is driven by events: the host's completion listener
	// hands it batches of ff:dag:completions through fabric_dispatch
	// (and, with Config[ConfigSweep] = "true", also sweeps it on a cadence).
	KindDispatcher Kind = "dispatcher"
)

// Manifest is what a plugin declares about itself, returned by its
// fabric_manifest export (binary, see MarshalBinary) and shown to people as
// snake_case JSON with units in the field names.
//
// Zero values mean "use the default" (see ApplyDefaults); Validate checks
// the result. The host may override cadence fields from its own config.
type Manifest struct {
	// ABI is the ABI version the plugin was built against (abi.Version of
	// its pdk).
	ABI string `json:"abi"`
	// Name identifies the plugin: lowercase letters, digits and '_', at most
	// 64 bytes. Two files declaring one name are two versions of one plugin.
	Name string `json:"name"`
	// Version is the plugin's own semantic version.
	Version string `json:"version"`
	// Kind is scanner or dispatcher.
	Kind Kind `json:"kind"`
	// IntervalMs is the default period of a full sweep over the partitions,
	// in milliseconds (default 1000, minimum 100).
	IntervalMs uint32 `json:"interval_ms"`
	// Family is the partition family swept: "flow", "budget" or "quota"
	// (default flow).
	Family string `json:"partition_family"`
	// BatchSize is the most items one call handles (default 50, at most
	// 10000).
	BatchSize uint32 `json:"batch_size"`
	// TimeoutMs bounds one call in milliseconds, host functions included
	// (default 5000, at most 60000). A call that overruns is killed.
	TimeoutMs uint32 `json:"timeout_ms"`
	// MaxPages caps linear memory in 64 KiB pages (default 1024 = 64 MiB,
	// at most 16384 = 1 GiB).
	MaxPages uint32 `json:"max_pages"`
	// Config is the plugin's default configuration, readable by the guest;
	// host config entries override it key by key.
	Config map[string]string `json:"config,omitempty"`
	// Capabilities bounds what the plugin may ask the host to do.
	Capabilities Capabilities `json:"capabilities"`
}

// Manifest defaults and limits, each in the unit of its field.
const (
	DefaultIntervalMs = 1000
	MinIntervalMs     = 100
	DefaultBatchSize  = 50
	MaxBatchSize      = 10000
	DefaultTimeoutMs  = 5000
	MaxTimeoutMs      = 60000
	DefaultMaxPages   = 1024
	MaxMaxPages       = 16384
)

// ApplyDefaults fills zero fields with their defaults.
func (m *Manifest) ApplyDefaults() {
	if m.Kind == "" {
		m.Kind = KindScanner
	}
	if m.IntervalMs == 0 {
		m.IntervalMs = DefaultIntervalMs
	}
	if m.Family == "" {
		m.Family = model.FamilyFlow.String()
	}
	if m.BatchSize == 0 {
		m.BatchSize = DefaultBatchSize
	}
	if m.TimeoutMs == 0 {
		m.TimeoutMs = DefaultTimeoutMs
	}
	if m.MaxPages == 0 {
		m.MaxPages = DefaultMaxPages
	}
}

// ErrInvalidManifest is matched by every manifest validation failure.
var ErrInvalidManifest = errors.New("abi: invalid manifest")

// identifier reports whether s is a lowercase letter followed by at most
// max-1 of [a-z0-9_] or extra. Hand-written rather than regexp so that
// plugins, which link this package, do not carry the regexp engine.
func identifier(s string, max int, extra byte) bool {
	if len(s) == 0 || len(s) > max || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && (extra == 0 || c != extra) {
			return false
		}
	}
	return true
}

func validName(s string) bool { return identifier(s, 64, 0) }

func validFunction(s string) bool {
	for _, p := range []string{"ff_", "fabric_"} {
		if len(s) > len(p) && s[:len(p)] == p {
			return identifier(s, len(p)+64, 0)
		}
	}
	return false
}

func validSQLName(s string) bool { return identifier(s, 128, '.') }

// Validate checks a manifest after ApplyDefaults, including ABI
// compatibility with this package's Version. Every error matches
// ErrInvalidManifest, and an ABI mismatch also matches ErrVersionMismatch.
func (m *Manifest) Validate() error {
	bad := func(text string) error {
		return errtext.Wrap(ErrInvalidManifest, ErrInvalidManifest.Error()+": "+text)
	}
	// badErr also wraps err, as fmt.Errorf("%w: ...%w") did.
	badErr := func(text string, err error) error {
		return errtext.Wrap2(ErrInvalidManifest, err, ErrInvalidManifest.Error()+": "+text+err.Error())
	}
	if err := CheckCompatible(Version, m.ABI); err != nil {
		return badErr("", err)
	}
	if !validName(m.Name) {
		return bad("name " + errtext.Q(m.Name) + ": want lowercase letters, digits and '_', starting with a letter, at most 64 bytes")
	}
	if _, err := ParseSemver(m.Version); err != nil {
		return badErr("version: ", err)
	}
	switch m.Kind {
	case KindScanner, KindDispatcher:
	default:
		return bad("kind " + errtext.Q(string(m.Kind)) + ": want scanner or dispatcher")
	}
	if m.IntervalMs < MinIntervalMs {
		return bad("interval_ms " + errtext.U(m.IntervalMs) + " is below the minimum " + errtext.D(MinIntervalMs))
	}
	if _, err := model.ParseFamily(m.Family); err != nil {
		return badErr("partition_family: ", err)
	}
	if m.BatchSize == 0 || m.BatchSize > MaxBatchSize {
		return bad("batch_size " + errtext.U(m.BatchSize) + ": want 1.." + errtext.D(MaxBatchSize))
	}
	if m.TimeoutMs == 0 || m.TimeoutMs > MaxTimeoutMs {
		return bad("timeout_ms " + errtext.U(m.TimeoutMs) + ": want 1.." + errtext.D(MaxTimeoutMs))
	}
	if m.MaxPages == 0 || m.MaxPages > MaxMaxPages {
		return bad("max_pages " + errtext.U(m.MaxPages) + ": want 1.." + errtext.D(MaxMaxPages))
	}
	return m.Capabilities.validate(bad)
}

// PartitionFamily returns the parsed Family (flow when it does not parse;
// Validate rejects that case).
func (m *Manifest) PartitionFamily() model.Family {
	f, err := model.ParseFamily(m.Family)
	if err != nil {
		return model.FamilyFlow
	}
	return f
}

// manifestTag starts a binary manifest so a stray buffer is not mistaken
// for one.
const manifestTag = 0xF1

// MarshalBinary encodes the manifest for the fabric_manifest export.
func (m *Manifest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 256))
	e.Byte(manifestTag)
	e.String(m.ABI)
	e.String(m.Name)
	e.String(m.Version)
	e.String(string(m.Kind))
	e.Uvarint(uint64(m.IntervalMs))
	e.String(m.Family)
	e.Uvarint(uint64(m.BatchSize))
	e.Uvarint(uint64(m.TimeoutMs))
	e.Uvarint(uint64(m.MaxPages))
	keys := make([]string, 0, len(m.Config))
	for k := range m.Config {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.Uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.String(k)
		e.String(m.Config[k])
	}
	e.Strings(m.Capabilities.FCall)
	e.Strings(m.Capabilities.Read)
	e.Strings(m.Capabilities.SQL)
	e.Bool(m.Capabilities.CrossPartition)
	if len(m.Capabilities.Write) > 0 { // ABI 1.1 trailer; absent in 1.0 manifests
		e.Strings(m.Capabilities.Write)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. It does not validate.
func (m *Manifest) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if tag := d.Byte(); d.Err() == nil && tag != manifestTag {
		return errtext.Wrap(ErrDecode, "manifest: "+ErrDecode.Error()+": tag 0x"+errtext.Hex2(tag)+", want 0x"+errtext.Hex2(manifestTag))
	}
	var out Manifest
	out.ABI = d.String()
	out.Name = d.String()
	out.Version = d.String()
	out.Kind = Kind(d.String())
	out.IntervalMs = d.Uint32()
	out.Family = d.String()
	out.BatchSize = d.Uint32()
	out.TimeoutMs = d.Uint32()
	out.MaxPages = d.Uint32()
	// An entry is at least its key's and its value's lengths; the map
	// grows as entries decode.
	if n := d.CountOf(2); n > 0 {
		out.Config = make(map[string]string, min(n, 64))
		for range n {
			k := d.String()
			if d.Err() != nil {
				break
			}
			out.Config[k] = d.String()
		}
	}
	out.Capabilities.FCall = d.Strings()
	out.Capabilities.Read = d.Strings()
	out.Capabilities.SQL = d.Strings()
	out.Capabilities.CrossPartition = d.Bool()
	if d.Err() == nil && d.Remaining() > 0 {
		out.Capabilities.Write = d.Strings()
	}
	if err := d.Finish("manifest"); err != nil {
		return err
	}
	*m = out
	return nil
}

// validReadPattern reports whether p is a usable key-family glob.
func validReadPattern(p string) error {
	if len(p) < 4 || p[:3] != "ff:" {
		return errors.New("must start with \"ff:\"")
	}
	if _, err := path.Match(p, ""); err != nil {
		return err
	}
	return nil
}
