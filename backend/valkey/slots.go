package valkey

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// SlotOwners returns which node serves each hash slot: on a cluster the
// primary's host:port from CLUSTER SLOTS (index = slot, "" for a slot no
// primary serves), otherwise a single entry naming the one server, which
// serves every slot. For observation only (fabric lanes' per-node counts):
// the client routes commands itself.
func (c *Client) SlotOwners(ctx context.Context) ([]string, error) {
	if !c.cluster {
		return []string{c.where}, nil
	}
	raw := c.c
	ranges, err := raw.Do(ctx, raw.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("valkey: cluster slots: %w", err)
	}
	out := make([]string, 16384)
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("valkey: cluster slots: malformed range: %v", err)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || lo < 0 || hi >= 16384 || lo > hi {
			return nil, fmt.Errorf("valkey: cluster slots: malformed range %v", f)
		}
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for s := lo; s <= hi; s++ {
			out[s] = addr
		}
	}
	return out, nil
}
