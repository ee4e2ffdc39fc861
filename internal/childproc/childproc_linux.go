//go:build linux

package childproc

import "syscall"

// Attr returns the attributes of a server child: its own process group
// (so a stop reaches all its processes) and, on Linux, SIGKILL when the
// parent dies without stopping it.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
