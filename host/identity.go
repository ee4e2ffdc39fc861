package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fabric-host/fabric/abi"
)

// A plugin's identity is the operator's, not what its manifest claims:
//
//   - The file names the plugin. A file of the plugin directory (and of
//     its shadow/ subdirectory) is NAME.wasm for the plugin whose manifest
//     declares NAME; any other file is refused (ErrNameMismatch). A second
//     file can thus never claim, replace or, once deleted, remove another
//     plugin, and a grant given to NAME goes to the file the operator put
//     at NAME.wasm.
//   - A grant may also name the files it is for (Grant.SHA256, Signers);
//     `fabric run` binds the stock grants to a trusted signature
//     (Policy.BindStock).
//   - A signed file older than the version the host has run of its plugin
//     is refused (ErrDowngrade) until the operator rolls back explicitly
//     (Rollback): a signature binds name, version and digest, and an old
//     signed file is still validly signed.

// ErrNameMismatch is matched by a plugin file refused because its name is
// not its plugin's: squatter.wasm declaring quota_reconciler.
var ErrNameMismatch = errors.New("host: plugin file is not named after its plugin")

// ErrDowngrade is matched by a signed plugin file refused because its
// version is older than the one the host has run: see Rollback.
var ErrDowngrade = errors.New("host: signed plugin file is older than the version running")

// checkFileName refuses a file whose name is not plugin name's (NAME.wasm).
func checkFileName(path, name string) error {
	base := filepath.Base(path)
	if strings.TrimSuffix(base, ".wasm") == name {
		return nil
	}
	return fmt.Errorf("%w: %s declares plugin %s; a plugin file must be named after its plugin (%s.wasm)", ErrNameMismatch, base, name, name)
}

// versionMark is the newest version of one plugin the host has run, and
// an older signed file refused (kept for Rollback to admit).
type versionMark struct {
	newest   abi.Semver
	version  string // newest as the manifest spelled it
	refused  string // path of the refused older file ("": none)
	refusedD string // its sha256
	admit    string // sha256 of a refused file Rollback admits once
}

// lessVersion reports whether a is older than b (MAJOR.MINOR.PATCH; a
// suffix is ignored, as abi.Semver says).
func lessVersion(a, b abi.Semver) bool {
	if a.Major != b.Major {
		return a.Major < b.Major
	}
	if a.Minor != b.Minor {
		return a.Minor < b.Minor
	}
	return a.Patch < b.Patch
}

// checkVersion refuses m, a file about to be installed, when it is signed
// and older than the newest version of its plugin the host has run, and
// otherwise records m's version as run; h.mu is held. Unsigned files are
// not compared: their version is only what they say.
func (h *Host) checkVersion(m *Module) error {
	man := m.Manifest()
	v, err := abi.ParseSemver(man.Version)
	if err != nil {
		return nil // Validate parsed it already
	}
	mark := h.versions[man.Name]
	if mark == nil {
		mark = &versionMark{}
		h.versions[man.Name] = mark
	}
	switch {
	case mark.version == "":
	case mark.admit != "" && mark.admit == m.sha256:
		// The operator's rollback: the older version is the newest now.
		mark.admit, mark.refused, mark.refusedD = "", "", ""
		mark.newest, mark.version = v, man.Version
		return nil
	case m.sig != nil && lessVersion(v, mark.newest):
		mark.refused, mark.refusedD = m.path, m.sha256
		return fmt.Errorf("%w: %s is %s %s, signed by key %s; the host has run %s (`fabric plugins rollback %s` admits it)",
			ErrDowngrade, filepath.Base(m.path), man.Name, man.Version, m.Signer(), mark.version, man.Name)
	}
	if mark.version == "" || lessVersion(mark.newest, v) {
		mark.newest, mark.version = v, man.Version
	}
	return nil
}

// admitDowngrade loads plugin name's older signed file that checkVersion
// refused, as the operator's explicit rollback, and returns the version
// now live. ok is false when no such file was refused.
func (h *Host) admitDowngrade(ctx context.Context, name string) (version string, ok bool, err error) {
	h.mu.Lock()
	mark := h.versions[name]
	if mark == nil || mark.refused == "" {
		h.mu.Unlock()
		return "", false, nil
	}
	path, digest := mark.refused, mark.refusedD
	mark.admit = digest
	h.mu.Unlock()
	m, err := h.loadModule(ctx, path)
	if err == nil && m.sha256 != digest {
		m.Close(ctx)
		err = fmt.Errorf("host: %s changed since it was refused as older (sha256 %s, now %s): not rolled back", path, digest, m.sha256)
	}
	if err != nil {
		h.mu.Lock()
		mark.admit = ""
		h.mu.Unlock()
		return "", true, err
	}
	v := m.Manifest().Version
	h.install(ctx, path, m, nil)
	st, live := h.Plugin(name)
	if !live || st.SHA256 != digest {
		return "", true, fmt.Errorf("host: %s %s was not installed", name, v)
	}
	return v, true, nil
}

// markVersion records m's version as the newest run of its plugin (a
// promotion or a rollback, the operator's choice); h.mu is held.
func (h *Host) markVersion(m *Module) {
	man := m.Manifest()
	v, err := abi.ParseSemver(man.Version)
	if err != nil {
		return
	}
	mark := h.versions[man.Name]
	if mark == nil {
		mark = &versionMark{}
		h.versions[man.Name] = mark
	}
	mark.newest, mark.version = v, man.Version
}
