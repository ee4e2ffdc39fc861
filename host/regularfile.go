package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is matched by a plugin path that is not a regular file: a
// FIFO, a device, a socket, a directory, or a symlink to one of those.
// The host never opens such a path for reading (a FIFO would block the
// loader until a writer came, a device such as /dev/zero would be read
// without end).
var ErrNotRegular = errors.New("host: plugin path is not a regular file")

// readRegularFile reads path when it is a regular file of at most
// maxBytes, and refuses it before reading anything otherwise (ErrNotRegular,
// errTooLarge). It never blocks on what path names.
//
// A symlink is followed when it resolves to a regular file within the
// limit (a deploy tool may link plugin files to a versioned store); a
// symlink to anything else is refused as what it resolves to.
//
// # Notes
//
//   - The path is checked with stat before it is opened, then opened with
//     O_NONBLOCK and checked again with fstat: a path swapped for a FIFO
//     in between is refused without waiting for a writer. The read stops
//     at maxBytes+1 bytes, so a file growing after the check is refused
//     too, not read without bound.
func readRegularFile(path string, maxBytes int64) ([]byte, error) {
	st, err := os.Stat(path) // follows symlinks, opens nothing
	if err != nil {
		return nil, fmt.Errorf("host: %w", err) // err names the path
	}
	if err := admitFile(path, st, maxBytes); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("host: open %s: %w", path, err)
	}
	defer f.Close()
	st, err = f.Stat()
	if err != nil {
		return nil, fmt.Errorf("host: stat %s: %w", path, err)
	}
	if err := admitFile(path, st, maxBytes); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(int(st.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, maxBytes+1)); err != nil {
		return nil, fmt.Errorf("host: read %s: %w", path, err)
	}
	if int64(buf.Len()) > maxBytes {
		return nil, fmt.Errorf("%w: %s grew past the %d-byte limit while read", errTooLarge, path, maxBytes)
	}
	return buf.Bytes(), nil
}

// admitFile refuses what st describes unless it is a regular file of at
// most maxBytes.
func admitFile(path string, st fs.FileInfo, maxBytes int64) error {
	if !st.Mode().IsRegular() {
		what := fileKind(st.Mode())
		if lst, err := os.Lstat(path); err == nil && lst.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			what = "a symlink to " + what + " (" + target + ")"
		}
		return fmt.Errorf("%w: %s is %s", ErrNotRegular, path, what)
	}
	if st.Size() > maxBytes {
		return fmt.Errorf("%w: %s is %d bytes, above the %d limit", errTooLarge, path, st.Size(), maxBytes)
	}
	return nil
}

// fileKind names what a non-regular file mode is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file (mode " + m.String() + ")"
}
