package abi

import (
	"path"
	"slices"
	"strings"

	"github.com/fabric-host/fabric/internal/errtext"
	"github.com/fabric-host/fabric/model"
)

// Capability is the kind of grant a host function needs.
type Capability uint8

// Capability kinds.
const (
	// CapNone: always allowed (clock, log, metric).
	CapNone Capability = iota
	// CapFCall: the called Functions name must be in Capabilities.FCall.
	CapFCall
	// CapRead: every key read must match a glob in Capabilities.Read.
	CapRead
	// CapSQL: the statement name, and every table the statement touches
	// (as "table.<name>"), must be in Capabilities.SQL.
	CapSQL
	// CapWrite: every key written must match a glob in Capabilities.Write
	// (ABI 1.1).
	CapWrite
)

// String names the capability as in the manifest.
func (c Capability) String() string {
	switch c {
	case CapNone:
		return "none"
	case CapFCall:
		return "fcall"
	case CapRead:
		return "read"
	case CapSQL:
		return "sql"
	case CapWrite:
		return "write"
	}
	return "capability_" + errtext.U(uint8(c))
}

// Capabilities is what a plugin requests in its manifest. The host loads
// the plugin only when the operator's grant (host.Grant) covers every
// request, then enforces the requested set on every host-function call.
// Nothing is granted by default.
//
// # Notes
//
//   - FCall lists Valkey Functions by exact name ("ff_promote_delayed");
//     only ff_* and fabric_* names are valid.
//   - Read lists key-family globs (path.Match syntax: '*' matches any run
//     of characters, colons and braces included), e.g.
//     "ff:idx:*:lane:*:delayed" or "ff:exec:*:core".
//   - SQL lists named statements a plugin may run and, as "table.<name>"
//     entries, the tables they may touch; the statements themselves are
//     the host's (model/pgsql), so a plugin never sends SQL text.
//   - Unless CrossPartition is set, every key a call names must carry the
//     hash tag of the partition being scanned: a scanner of {fp:7} cannot
//     touch {fp:8}.
type Capabilities struct {
	FCall          []string `json:"fcall,omitempty"`
	Read           []string `json:"read,omitempty"`
	SQL            []string `json:"sql,omitempty"`
	CrossPartition bool     `json:"cross_partition,omitempty"`
	// Write lists key-family globs the write host function may change
	// (same syntax as Read). ABI 1.1.
	Write []string `json:"write,omitempty"`
}

func (c *Capabilities) validate(bad func(string) error) error {
	for _, f := range c.FCall {
		if !validFunction(f) {
			return bad("capabilities.fcall " + errtext.Q(f) + ": want an ff_* or fabric_* function name")
		}
	}
	for _, p := range c.Read {
		if err := validReadPattern(p); err != nil {
			return bad("capabilities.read " + errtext.Q(p) + ": " + err.Error())
		}
	}
	for _, p := range c.Write {
		if err := validReadPattern(p); err != nil {
			return bad("capabilities.write " + errtext.Q(p) + ": " + err.Error())
		}
	}
	for _, s := range c.SQL {
		if !validSQLName(s) {
			return bad("capabilities.sql " + errtext.Q(s) + ": want a statement name")
		}
	}
	return nil
}

// AllowFCall returns nil when function fn is granted, else a CodeDenied
// *Error naming the grant.
func (c *Capabilities) AllowFCall(fn string) error {
	if slices.Contains(c.FCall, fn) {
		return nil
	}
	return Errorf(CodeDenied, "fcall "+fn+" is not granted (capabilities.fcall: ["+strings.Join(c.FCall, " ")+"])")
}

// AllowRead returns nil when key matches a read glob, else a CodeDenied
// *Error naming the grant.
func (c *Capabilities) AllowRead(key string) error {
	for _, p := range c.Read {
		if ok, _ := path.Match(p, key); ok {
			return nil
		}
	}
	return Errorf(CodeDenied, "read of "+key+" is not granted (capabilities.read: ["+strings.Join(c.Read, " ")+"])")
}

// AllowWrite returns nil when key matches a write glob, else a CodeDenied
// *Error naming the grant.
func (c *Capabilities) AllowWrite(key string) error {
	for _, p := range c.Write {
		if ok, _ := path.Match(p, key); ok {
			return nil
		}
	}
	return Errorf(CodeDenied, "write of "+key+" is not granted (capabilities.write: ["+strings.Join(c.Write, " ")+"])")
}

// AllowSQL returns nil when statement name is granted, else a CodeDenied
// *Error.
func (c *Capabilities) AllowSQL(name string) error {
	if slices.Contains(c.SQL, name) {
		return nil
	}
	return Errorf(CodeDenied, "sql "+name+" is not granted (capabilities.sql: ["+strings.Join(c.SQL, " ")+"])")
}

// GlobalReadKeys are the deployment-wide keys (no hash tag) any partition
// call may read once its read grant names them: the lane registry and
// the partition config. They are never exempt for writes or FCALL keys.
var GlobalReadKeys = []string{model.KeyLanesIndex, model.KeyConfigPartitions}

// IsGlobalReadKey reports whether key is one of GlobalReadKeys.
func IsGlobalReadKey(key string) bool { return slices.Contains(GlobalReadKeys, key) }

// AllowKeyOnPartition returns nil when key's hash tag (its first {...},
// as Valkey cluster slotting reads it) is tag, e.g. "{fp:7}", or the grant
// allows cross-partition access; else a CodeCrossPartition *Error.
func (c *Capabilities) AllowKeyOnPartition(key, tag string) error {
	if c.CrossPartition || HashTag(key) == tag {
		return nil
	}
	return Errorf(CodeCrossPartition, "key "+key+" is not on partition "+tag)
}

// HashTag returns the first "{...}" of key, braces included, or "" when
// the key has none.
func HashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i : i+j+2]
}
