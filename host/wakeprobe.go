package host

import (
	"context"
	"time"
)

// probeWakes reads, in one pipelined round trip, the lowest score of
// every index key that woke a partition (keys: partition → its keys), so
// a write of work that is not due yet reschedules the partition's timer
// instead of costing a plugin call. It returns, for each partition whose
// keys hold nothing due by now, when its earliest member falls due on the
// host's clock (dueTime; zero: its keys are empty); a partition
// missing from the result must be scanned (something is due, or the
// probe could not tell).
func (p *plugin) probeWakes(ctx context.Context, keys map[int][]string) map[int]time.Time {
	if len(keys) == 0 || p.h.cfg.Backend == nil {
		return nil
	}
	type probe struct {
		part int
		n    int
	}
	var all []string
	var order []probe
	for i, ks := range keys {
		if len(ks) == 0 {
			continue
		}
		all = append(all, ks...)
		order = append(order, probe{i, len(ks)})
	}
	if len(all) == 0 {
		return nil
	}
	res := p.h.cfg.Backend.LowestScores(ctx, all)
	now := p.h.cfg.Clock.Now()
	out := make(map[int]time.Time, len(order))
	j := 0
	for _, pr := range order {
		var earliest time.Time
		known := true
		for range pr.n {
			r := res[j]
			j++
			if r.Err != nil {
				known = false
				continue
			}
			if r.Empty {
				continue // emptied since the write: nothing from this key
			}
			at, ok := p.dueTime(int64(r.Score))
			if !ok {
				known = false
				continue
			}
			if !now.Before(at) {
				known = false // due: scan
				continue
			}
			if earliest.IsZero() || at.Before(earliest) {
				earliest = at
			}
		}
		if known {
			out[pr.part] = earliest
		}
	}
	return out
}
