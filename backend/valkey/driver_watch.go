package valkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// WatchTerminal implements backend.Driver: the ZADD keyevents of the
// client's database (enabled with EnableZaddKeyevents; a server that
// refuses CONFIG is an error, and the caller falls back to reading
// states on a timer), filtered to the lane terminal indexes every
// terminal transition ZADDs its execution to; wake gets the index's flow
// partition.
func (d *Driver) WatchTerminal(ctx context.Context, wake func(partition int), onUp func()) error {
	if err := d.c.EnableZaddKeyevents(ctx); err != nil {
		return fmt.Errorf("watch terminal transitions: %w", err)
	}
	return d.c.WatchZaddKeyevents(ctx, func(key string) {
		if p, ok := terminalIndexPartition(key); ok {
			wake(p)
		}
	}, onUp)
}

// terminalIndexPartition returns the flow partition of a lane terminal
// index key, ff:idx:{fp:N}:lane:<lane>:terminal, and whether key is one.
func terminalIndexPartition(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, "ff:idx:{fp:")
	if !ok || !strings.HasSuffix(rest, ":terminal") {
		return 0, false
	}
	n, tail, ok := strings.Cut(rest, "}:lane:")
	if !ok || tail == "" {
		return 0, false
	}
	p, err := strconv.ParseUint(n, 10, 16)
	if err != nil {
		return 0, false
	}
	return int(p), true
}
