package abi

import (
	"errors"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/internal/errtext"
)

// Version is the ABI version this build of the host and pdk speak.
//
// # Notes
//
//   - Major: a message layout or calling convention changed; the host refuses
//     any plugin of another major.
//   - Minor: host functions were added or the calling convention was
//     extended compatibly (1.2: sized pointers, see SizedPtr); a plugin
//     built against a newer minor than the host's may need what the host
//     lacks, so it is refused too.
//   - Patch: new enum values or codes that old peers can ignore (1.2.1:
//     StatusDryRun and CodeDryRun, the replies of a shadow run's writes).
const Version = "1.2.1"

// ErrVersionMismatch is matched (errors.Is) by every ABI incompatibility.
var ErrVersionMismatch = errors.New("abi: version mismatch")

// ErrInvalidVersion is returned for text that is not MAJOR.MINOR.PATCH.
var ErrInvalidVersion = errors.New("abi: invalid semantic version")

// Semver is a parsed MAJOR.MINOR.PATCH version; a pre-release or build
// suffix is kept verbatim in Suffix and ignored by comparisons.
type Semver struct {
	Major, Minor, Patch uint32
	Suffix              string
}

// ParseSemver parses "1.2.3", "1.2.3-rc1" or "1.2.3+build".
func ParseSemver(s string) (Semver, error) {
	var v Semver
	core := s
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		core, v.Suffix = s[:i], s[i:]
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Semver{}, errtext.Wrap(ErrInvalidVersion, ErrInvalidVersion.Error()+": "+errtext.Q(s))
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil || (len(p) > 1 && p[0] == '0') {
			return Semver{}, errtext.Wrap(ErrInvalidVersion, ErrInvalidVersion.Error()+": "+errtext.Q(s))
		}
		switch i {
		case 0:
			v.Major = uint32(n)
		case 1:
			v.Minor = uint32(n)
		case 2:
			v.Patch = uint32(n)
		}
	}
	return v, nil
}

// String renders the version.
func (v Semver) String() string {
	return errtext.U(v.Major) + "." + errtext.U(v.Minor) + "." + errtext.U(v.Patch) + v.Suffix
}

// VersionMismatchError says why a plugin's ABI is refused. It matches
// ErrVersionMismatch with errors.Is.
type VersionMismatchError struct {
	// Host is the host's ABI version, Plugin the plugin's.
	Host, Plugin string
	// Reason is a short human explanation.
	Reason string
}

// Error renders the mismatch.
func (e *VersionMismatchError) Error() string {
	return "abi: version mismatch: plugin speaks ABI " + e.Plugin + ", host speaks " + e.Host + ": " + e.Reason
}

// Unwrap returns ErrVersionMismatch.
func (e *VersionMismatchError) Unwrap() error { return ErrVersionMismatch }

// CheckCompatible reports whether a plugin declaring ABI version plugin can
// run on a host speaking host. It returns a *VersionMismatchError (matching
// ErrVersionMismatch) when the majors differ or the plugin needs a newer
// minor, and an ErrInvalidVersion error when either string does not parse.
func CheckCompatible(host, plugin string) error {
	h, err := ParseSemver(host)
	if err != nil {
		return errtext.Wrap(err, "host ABI: "+err.Error())
	}
	p, err := ParseSemver(plugin)
	if err != nil {
		return errtext.Wrap(err, "plugin ABI: "+err.Error())
	}
	switch {
	case h.Major != p.Major:
		return &VersionMismatchError{Host: host, Plugin: plugin, Reason: "major " + errtext.U(p.Major) + " is not " + errtext.U(h.Major)}
	case p.Minor > h.Minor:
		return &VersionMismatchError{Host: host, Plugin: plugin, Reason: "plugin needs minor " + errtext.U(p.Minor) + ", host has " + errtext.U(h.Minor)}
	}
	return nil
}
