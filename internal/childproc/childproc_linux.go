//go:build linux

package childproc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Attr returns the attributes of a server child: its own process group
// (so a stop reaches all its processes) and, on Linux, SIGKILL when the
// parent dies without stopping it.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// groupAlive reports whether a process of group pgid other than a zombie
// is alive, from /proc (false when /proc cannot be read).
func groupAlive(pgid int) bool { return LiveGroupMember(pgid) != 0 }

// LiveGroupMember returns the pid of a process of group pgid other than a
// zombie, from /proc: 0 when there is none (or /proc cannot be read).
func LiveGroupMember(pgid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after comm's ")": state ppid pgrp ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[0] != "Z" && f[2] == want {
			return pid
		}
	}
	return 0
}
