//go:build linux

package host

import (
	"io/fs"
	"syscall"
	"time"
)

// accessTime returns a file's last access time where the system keeps it.
func accessTime(info fs.FileInfo) (time.Time, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(st.Atim.Sec, st.Atim.Nsec), true
}
