package main

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Keys the live view reads while it owns the terminal.
const (
	keyInterrupt = 0x03 // Ctrl-C
	keyQuit      = 'q'
)

// catchInterruptKey makes the terminal on in deliver Ctrl-C (and q) to
// the run as keys instead of raising SIGINT, and calls stop on the first
// one; a second Ctrl-C restores the terminal and exits 130 at once.
//
// Why: under `make run` a SIGINT from the terminal reaches make too,
// and make reports the interrupt and exits 130 whatever fabric does
// (README: Ctrl-C drains and exits 0). As a key it reaches fabric alone:
// fabric drains, exits 0, and make exits 0 with it. Only line
// discipline flags change (ISIG, ICANON, ECHO); output processing stays,
// so the view's lines render as before. restore puts the terminal back
// and is safe to call more than once. When in is not a terminal nothing
// changes and restore does nothing.
func catchInterruptKey(in *os.File, stop func()) (restore func()) {
	fd := int(in.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return func() {}
	}
	raw := *old
	raw.Lflag &^= unix.ISIG | unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return func() {}
	}
	restored := make(chan struct{})
	var once sync.Once
	done := func() {
		once.Do(func() {
			close(restored)
			_ = unix.IoctlSetTermios(fd, ioctlSetTermios, old)
		})
	}
	go func() {
		buf := make([]byte, 1)
		stopped := false
		for {
			n, err := in.Read(buf)
			if err != nil {
				return
			}
			select {
			case <-restored:
				return // the terminal is the shell's again
			default:
			}
			if n == 0 || (buf[0] != keyInterrupt && buf[0] != keyQuit) {
				continue
			}
			if !stopped {
				stopped = true
				stop()
				continue
			}
			if buf[0] == keyInterrupt {
				done()
				os.Exit(130)
			}
		}
	}()
	return done
}
