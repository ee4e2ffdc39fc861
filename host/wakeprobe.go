package host

import (
	"context"
	"time"

	vk "github.com/valkey-io/valkey-go"
)

// probeWakes reads, in one pipelined round trip, the lowest score of
// every index key that woke a partition (keys: partition → its keys), so
// a write of work that is not due yet reschedules the partition's timer
// instead of costing a plugin call. It returns, for each partition whose
// keys hold nothing due by now, when its earliest member falls due on the
// host's clock (a hair past it; zero: its keys are empty); a partition
// missing from the result must be scanned (something is due, or the
// probe could not tell).
func (p *plugin) probeWakes(ctx context.Context, keys map[int][]string) map[int]time.Time {
	if len(keys) == 0 || p.h.cfg.Backend == nil {
		return nil
	}
	raw := p.h.cfg.Backend.Raw()
	type probe struct {
		part int
		n    int
	}
	var cmds vk.Commands
	var order []probe
	for i, ks := range keys {
		if len(ks) == 0 {
			continue
		}
		for _, k := range ks {
			cmds = append(cmds, raw.B().Zrange().Key(k).Min("0").Max("0").Withscores().Build())
		}
		order = append(order, probe{i, len(ks)})
	}
	if len(cmds) == 0 {
		return nil
	}
	res := raw.DoMulti(ctx, cmds...)
	now := p.h.cfg.Clock.Now()
	out := make(map[int]time.Time, len(order))
	j := 0
	for _, pr := range order {
		var earliest time.Time
		known := true
		for range pr.n {
			r := res[j]
			j++
			zs, err := r.AsZScores()
			if err != nil {
				known = false
				continue
			}
			if len(zs) == 0 {
				continue // emptied since the write: nothing from this key
			}
			at, ok := p.wake.dueAt(int64(zs[0].Score))
			if !ok {
				known = false
				continue
			}
			at = at.Add(time.Millisecond) // a hair past: the score must be <= server now
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
