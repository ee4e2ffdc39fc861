//go:build !linux && !windows && !js && !wasip1 && !plan9

package childproc

import "syscall"

// Attr returns the attributes of a server child: its own process group,
// so a stop reaches all its processes. Outside Linux there is no
// parent-death signal: a child outlives a parent killed with -9.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupAlive is false outside Linux: there is no /proc to tell a live
// member of the group from a zombie, and Kill does not wait for them.
func groupAlive(int) bool { return false }

// LiveGroupMember is 0 outside Linux (see groupAlive).
func LiveGroupMember(int) int { return 0 }
