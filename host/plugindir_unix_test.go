//go:build linux || darwin

package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/host"
)

// TestPluginDirAdmitsRegularFilesOnly: the plugin directory admits
// regular files only, checked before anything is read. A FIFO named
// *.wasm (present at start, and dropped later), a symlink to /dev/zero
// named *.wasm and a sparse file above the size limit are each rejected
// with their reason, and neither the initial scan nor the watcher waits
// on them: a plugin dropped after them loads as any other. (Before, the
// FIFO held the loader until a writer came — the host never finished its
// scan, a later plugin never loaded — and /dev/zero was read until the
// process ran out of memory.)
func TestPluginDirAdmitsRegularFilesOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noStart: true})
	early := filepath.Join(b.dir, "early_fifo.wasm")
	if err := syscall.Mkfifo(early, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	b.start(t) // fails unless the initial scan gets past the FIFO
	want := map[string]string{early: host.RejectNotRegular}
	fifo, zero, huge := filepath.Join(b.dir, "fifo.wasm"), filepath.Join(b.dir, "zero.wasm"), filepath.Join(b.dir, "huge.wasm")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: the size is what is checked, nothing is written.
	if err := f.Truncate(host.HostMaxFileBytesDefault + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want[fifo], want[zero], want[huge] = host.RejectNotRegular, host.RejectNotRegular, host.RejectTooLarge
	got := map[string]host.FileStatus{}
	for len(got) < len(want) {
		fs := b.sig.Rejected.WaitOrTimeout(t)
		got[fs.Path] = fs
	}
	for path, reason := range want {
		fs, ok := got[path]
		if !ok || fs.Reason != reason || fs.State != host.StateInvalid {
			t.Errorf("%s: rejected %+v, want reason %q", filepath.Base(path), fs, reason)
		}
	}
	if e := got[zero].Error; !strings.Contains(e, "symlink to a character device (/dev/zero)") {
		t.Errorf("/dev/zero symlink rejected as %q", e)
	}
	if e := got[fifo].Error; !strings.Contains(e, "named pipe") {
		t.Errorf("FIFO rejected as %q", e)
	}

	// A plugin dropped after them loads: the watcher is not held.
	dropped := time.Now()
	copyFile(t, fixture(t, "healthy"), filepath.Join(b.dir, "healthy.wasm"))
	waitLoaded(t, b, "healthy")
	t.Logf("healthy loaded %s after it was dropped beside the FIFOs and /dev/zero", time.Since(dropped).Round(time.Millisecond))
	for _, fs := range b.host.Rejected() {
		if _, ok := want[fs.Path]; !ok {
			t.Errorf("unexpected rejection %+v", fs)
		}
	}
}

// A symlink to a regular plugin file is followed: it loads as the file.
func TestPluginDirFollowsSymlinkToRegularFile(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	store := filepath.Join(t.TempDir(), "healthy-1.0.0.wasm")
	copyFile(t, fixture(t, "healthy"), store)
	if err := os.Symlink(store, filepath.Join(b.dir, "healthy.wasm")); err != nil {
		t.Fatal(err)
	}
	waitLoaded(t, b, "healthy")
}
