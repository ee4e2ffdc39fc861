//go:build !linux

package host

import (
	"io/fs"
	"time"
)

// accessTime returns a file's last access time where the system keeps it;
// outside Linux the prune orders by modification time alone.
func accessTime(fs.FileInfo) (time.Time, bool) { return time.Time{}, false }
