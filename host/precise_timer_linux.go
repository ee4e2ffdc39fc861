//go:build linux

package host

import (
	"syscall"
	"time"
)

// sleepPrecise sleeps d in the OS (nanosleep: to the kernel's timer
// slack, tens of microseconds), blocking the calling thread.
func sleepPrecise(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left // a signal (the Go runtime preempts with SIGURG): sleep the rest
	}
}
