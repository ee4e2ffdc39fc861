package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
//     signed file is still validly signed. With Config.VersionsFile the
//     versions run are kept across restarts.

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
		h.saveVersions()
		return nil
	case m.sig != nil && lessVersion(v, mark.newest):
		mark.refused, mark.refusedD = m.path, m.sha256
		return fmt.Errorf("%w: %s is %s %s, signed by key %s; the host has run %s (`fabric plugins rollback %s` admits it)",
			ErrDowngrade, filepath.Base(m.path), man.Name, man.Version, m.Signer(), mark.version, man.Name)
	}
	if mark.version == "" || lessVersion(mark.newest, v) {
		mark.newest, mark.version = v, man.Version
		h.saveVersions()
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
	h.saveVersions()
}

// versionsFile is Config.VersionsFile's content.
type versionsFile struct {
	// Plugins is the newest version run of each plugin, by name.
	Plugins map[string]string `json:"plugins"`
}

// maxVersionsFileBytes bounds the versions file the host reads.
const maxVersionsFileBytes = 1 << 20

// VersionsFileFor is where `fabric run` keeps the versions of the
// plugins of pluginDir (Config.VersionsFile): beside the compilation
// cache cacheDir, one file per plugin directory; "" when cacheDir is
// "" (in memory).
func VersionsFileFor(cacheDir, pluginDir string) string {
	if cacheDir == "" {
		return ""
	}
	abs, err := filepath.Abs(pluginDir)
	if err != nil {
		abs = pluginDir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(filepath.Dir(filepath.Clean(cacheDir)), "plugin-versions", hex.EncodeToString(sum[:8])+".json")
}

// loadVersions reads path's versions ("": none; a missing file is
// empty). A file that is not one is an error naming it: the host does
// not start forgetting what it ran.
func loadVersions(path string) (map[string]*versionMark, error) {
	marks := map[string]*versionMark{}
	if path == "" {
		return marks, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return marks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host: versions file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxVersionsFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("host: versions file %s: %w", path, err)
	}
	var vf versionsFile
	if len(b) > maxVersionsFileBytes {
		return nil, fmt.Errorf("host: versions file %s is above %d bytes", path, maxVersionsFileBytes)
	}
	if err := json.Unmarshal(b, &vf); err != nil {
		return nil, fmt.Errorf("host: versions file %s: %w (remove it to forget the versions run)", path, err)
	}
	for name, version := range vf.Plugins {
		v, err := abi.ParseSemver(version)
		if err != nil {
			return nil, fmt.Errorf("host: versions file %s: plugin %q: %w", path, name, err)
		}
		marks[name] = &versionMark{newest: v, version: version}
	}
	return marks, nil
}

// saveVersions writes the versions run to Config.VersionsFile (atomically:
// a temporary file renamed over it); h.mu is held. A failure is logged:
// the host keeps them in memory.
func (h *Host) saveVersions() {
	path := h.cfg.VersionsFile
	if path == "" {
		return
	}
	vf := versionsFile{Plugins: make(map[string]string, len(h.versions))}
	for name, mark := range h.versions {
		if mark.version != "" {
			vf.Plugins[name] = mark.version
		}
	}
	err := writeFileAtomic(path, vf)
	if err != nil {
		h.cfg.Logger.Warn("plugin versions not saved: a signed downgrade is refused until the host restarts only", "file", path, "error", err)
	}
}

// writeFileAtomic writes v as JSON to path through a temporary file.
func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".versions-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
