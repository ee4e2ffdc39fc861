package host

import (
	"context"
	"sync"
	"time"
)

// serverClockRefresh is how often serverClock reads the server's TIME.
const serverClockRefresh = time.Second

// serverClockTightRTT: a TIME read whose round trip took longer than this
// may be dated late (the estimate then trails the server by up to the
// round trip), so it is kept for only a twentieth of the refresh.
const serverClockTightRTT = time.Millisecond

// serverClock answers the server's time, in milliseconds, without a round
// trip per read: it reads TIME (to the microsecond) at most every refresh
// and adds the time elapsed on the host's monotonic clock since the reply
// arrived. Scanners ask for the time once or twice per partition, so this
// saves that many round trips per partition scan.
//
// # Notes
//
//   - The reading is dated at the reply's arrival, so the estimate is
//     never ahead of the server (it trails it by the reply's way back):
//     a scanner never reads an item as due before the server itself
//     would. Reading and estimate are kept in microseconds and truncated
//     to the millisecond only when answered, so the answer reaches a
//     millisecond within the reply's way back of the server, not up to
//     two milliseconds later as two truncations made it.
//   - It measures elapsed time with the real monotonic clock, not
//     Config.Clock: the server's clock is real even when a test drives the
//     host's waits with a fake one.
//   - A reading whose round trip took longer than tight
//     (a loaded host, a slow network) may be dated that much late; it is
//     replaced after a twentieth of the refresh rather than trailing for
//     a whole one.
//   - Answers never go backwards.
type serverClock struct {
	// read returns the server's time in microseconds.
	read    func(context.Context) (int64, error)
	refresh time.Duration
	// tight is the longest round trip of a reading kept for a whole
	// refresh (serverClockTightRTT).
	tight time.Duration

	mu     sync.Mutex
	baseUs int64         // the last TIME reading, µs
	at     time.Time     // when it arrived
	keep   time.Duration // how long the reading is used
	last   int64         // the latest answer, ms
}

func newServerClock(read func(context.Context) (int64, error), refresh time.Duration) *serverClock {
	return &serverClock{read: read, refresh: refresh, tight: serverClockTightRTT}
}

// msReader adapts a millisecond clock read to serverClock's microseconds.
func msReader(read func(context.Context) (int64, error)) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		ms, err := read(ctx)
		return ms * 1000, err
	}
}

// Now returns the server's time in milliseconds.
func (s *serverClock) Now(ctx context.Context) (int64, error) {
	s.mu.Lock()
	if !s.at.IsZero() {
		if d := time.Since(s.at); d < s.keep {
			v := max((s.baseUs+d.Microseconds())/1000, s.last)
			s.last = v
			s.mu.Unlock()
			return v, nil
		}
	}
	s.mu.Unlock()
	sent := time.Now()
	us, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	arrived := time.Now()
	keep := s.refresh
	if arrived.Sub(sent) > s.tight {
		keep /= 20
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.baseUs, s.at, s.keep = us, arrived, keep
	s.last = max(us/1000, s.last)
	return s.last, nil
}

// When returns the real time at which Now starts answering ms or more
// under its latest reading (false before the first): a due-time timer set
// for it finds a due item of score ms due, without a margin.
func (s *serverClock) When(ms int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() {
		return time.Time{}, false
	}
	return s.at.Add(time.Duration(ms*1000-s.baseUs) * time.Microsecond), true
}
