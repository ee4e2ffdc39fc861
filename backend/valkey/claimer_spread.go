package valkey

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// spreadWindow is how many of the spread lanes' partitions one Claim
// round reads. The window moves on every round (round robin), so the head
// of every partition is read at least once every ceil(P/spreadWindow)
// rounds for P spread partitions: no partition waits behind busier ones.
const spreadWindow = 16

// spreadLanes is what a worker knows about its lanes' solo partitioners:
// the lanes that spread (model.SpreadSolo) and the union of their
// partitions, read round robin by scanSpread. It keeps the partition
// choice apart from the claim call: scanSpread only buffers candidates.
type spreadLanes struct {
	mu     sync.Mutex
	choice map[string]model.LaneSpread // every worker lane's choice
	at     time.Time                   // when choice was read
	parts  []model.Partition           // partitions of the spread lanes
	only   map[model.Partition][]string
	cursor int
	last   time.Time // last window read
	found  bool      // the last window read found work
}

// readSpreads reads the solo-partitioner choice of every lane of the
// worker in one round trip. A stored value that does not parse is logged
// and read as the default.
func (cl *Claimer) readSpreads(ctx context.Context) (map[string]model.LaneSpread, error) {
	raw := cl.vc.Raw()
	cmds := make(vk.Commands, len(cl.cfg.Lanes))
	for i, l := range cl.cfg.Lanes {
		cmds[i] = raw.B().Hgetall().Key(model.LaneConfigKey(l)).Build()
	}
	out := map[string]model.LaneSpread{}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("read lane %q config: %w", cl.cfg.Lanes[i], err)
		}
		s, err := model.ParseLaneSpread(m)
		if err != nil {
			// Producers refuse to enqueue on such a lane; the worker keeps
			// serving what is there: its home partition and, when the lane
			// spread before, its spread partitions (setChoice keeps them).
			cl.log.Warn("lane config unreadable; reading the lane as FlowFabric's default", "lane", cl.cfg.Lanes[i], "error", err)
		}
		out[cl.cfg.Lanes[i]] = s
	}
	return out, nil
}

// initSpread reads the worker's lanes' choices when it connects; a lane
// that spreads leaves the solo scan (its home partition is the first of
// its spread partitions, read in turn with the others, so it gets no
// precedence over them).
func (cl *Claimer) initSpread(ctx context.Context) error {
	choice, err := cl.readSpreads(ctx)
	if err != nil {
		return err
	}
	cl.spread.setChoice(choice, cl.parts, cl.cfg.Clock())
	// Workers of one lane start their round robin at different windows,
	// so that they do not read (and race for) the same heads in step.
	cl.spread.mu.Lock()
	if n := len(cl.spread.parts); n > 0 {
		cl.spread.cursor = int(model.FNV1a64(cl.cfg.WorkerInstanceID) % uint64(n))
	}
	cl.spread.mu.Unlock()
	for _, l := range cl.cfg.Lanes {
		if !choice[l].Spread {
			continue
		}
		p := cl.parts.SoloPartition(l)
		cl.soloLanes[p] = slices.DeleteFunc(cl.soloLanes[p], func(x string) bool { return x == l })
		if len(cl.soloLanes[p]) == 0 {
			delete(cl.soloLanes, p)
			cl.soloParts = slices.DeleteFunc(cl.soloParts, func(x model.Partition) bool { return x == p })
		}
	}
	return nil
}

// setChoice records the lanes' choices and rebuilds the spread partition
// list. A lane that spread once keeps at least its home partition here
// (its solo scan entry was dropped at connect).
func (s *spreadLanes) setChoice(choice map[string]model.LaneSpread, pc model.PartitionConfig, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.choice
	s.choice, s.at = choice, now
	s.parts, s.only = nil, map[model.Partition][]string{}
	lanes := make([]string, 0, len(choice))
	for l, c := range choice {
		if c.Spread || prev[l].Spread {
			lanes = append(lanes, l)
		}
	}
	slices.Sort(lanes)
	for _, l := range lanes {
		if !choice[l].Spread {
			choice[l] = prev[l] // keep reading where its executions were placed
		}
		for _, p := range choice[l].Partitions(l, pc) {
			if _, ok := s.only[p]; !ok {
				s.parts = append(s.parts, p)
			}
			s.only[p] = append(s.only[p], l)
		}
	}
	slices.SortFunc(s.parts, func(a, b model.Partition) int { return int(a.Index) - int(b.Index) })
	s.cursor %= max(len(s.parts), 1)
}

// nextWindow returns the next spreadWindow spread partitions and the lanes
// to read on each, or nil when the worker has no spread lane or, with
// notifications up, the last window found nothing less than
// notifiedWindowEvery ago (notifications point at new work; the windows
// catch what they missed and keep a backlog fair).
func (s *spreadLanes) nextWindow(now time.Time, notified bool) ([]model.Partition, map[model.Partition][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parts) == 0 {
		return nil, nil
	}
	if notified && !s.found && now.Sub(s.last) < notifiedWindowEvery && !now.Before(s.last) {
		return nil, nil
	}
	s.last = now
	n := min(spreadWindow, len(s.parts))
	win := make([]model.Partition, n)
	for i := range win {
		win[i] = s.parts[(s.cursor+i)%len(s.parts)]
	}
	s.cursor = (s.cursor + n) % len(s.parts)
	return win, s.only
}

func (s *spreadLanes) stale(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.at) >= backend.LaneSpreadTTL || now.Before(s.at)
}

func (s *spreadLanes) foundWork(found bool) {
	s.mu.Lock()
	s.found = found
	s.mu.Unlock()
}

// scanSpread reads the heads of the next window of the spread lanes'
// partitions, promotes due delayed heads (with PromoteDelayed) and
// buffers the eligible ones for the claim. The lanes' choices are read
// again every backend.LaneSpreadTTL.
func (cl *Claimer) scanSpread(ctx context.Context) error {
	now := cl.cfg.Clock()
	if cl.spread.stale(now) {
		choice, err := cl.readSpreads(ctx)
		if err != nil {
			return err
		}
		cl.spread.setChoice(choice, cl.parts, now)
	}
	win, only := cl.spread.nextWindow(now, cl.NotificationsUp())
	if len(win) == 0 {
		return nil
	}
	cands, err := cl.scan(ctx, win, cl.headsPerKey(), only)
	if err != nil {
		return err
	}
	var eligible []candidate
	for _, c := range cands {
		if c.promote != nil {
			cl.promoteDue(ctx, c, *c.promote)
			continue
		}
		eligible = append(eligible, c)
	}
	cl.spread.foundWork(len(eligible) > 0)
	cl.keepBuffered(eligible)
	return nil
}
