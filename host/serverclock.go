package host

import (
	"context"
	"sync"
	"time"
)

// serverClockRefresh is how often serverClock reads the server's TIME.
const serverClockRefresh = time.Second

// serverClock answers the server's time, in milliseconds, without a round
// trip per read: it reads TIME at most every refresh and adds the time
// elapsed on the host's monotonic clock since the reply arrived. Scanners
// ask for the time once or twice per partition, so this saves that many
// round trips per partition scan.
//
// # Notes
//
//   - The reading is dated at the reply's arrival and truncated to the
//     millisecond, so the estimate is never ahead of the server (it may be
//     behind by one round trip): a scanner never reads an item as due
//     before the server itself would.
//   - It measures elapsed time with the real monotonic clock, not
//     Config.Clock: the server's clock is real even when a test drives the
//     host's waits with a fake one.
//   - Answers never go backwards.
type serverClock struct {
	read    func(context.Context) (int64, error)
	refresh time.Duration

	mu     sync.Mutex
	baseMs int64     // the last TIME reading
	at     time.Time // when it arrived
	last   int64     // the latest answer
}

func newServerClock(read func(context.Context) (int64, error), refresh time.Duration) *serverClock {
	return &serverClock{read: read, refresh: refresh}
}

// Now returns the server's time in milliseconds.
func (s *serverClock) Now(ctx context.Context) (int64, error) {
	s.mu.Lock()
	if !s.at.IsZero() {
		if d := time.Since(s.at); d < s.refresh {
			v := max(s.baseMs+d.Milliseconds(), s.last)
			s.last = v
			s.mu.Unlock()
			return v, nil
		}
	}
	s.mu.Unlock()
	ms, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	arrived := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.baseMs, s.at = ms, arrived
	s.last = max(ms, s.last)
	return s.last, nil
}
