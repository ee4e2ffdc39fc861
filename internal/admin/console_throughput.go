package admin

import (
	"net/http"
	"time"
)

// ThroughputPoint is one throughput reading of the sampler.
type ThroughputPoint struct {
	At time.Time `json:"at"`
	// PerSecond is executions reaching a terminal state per second since
	// the census before.
	PerSecond float64 `json:"per_second"`
}

// throughputHistory is how many readings the sampler keeps (5 minutes
// at the default 2 s interval).
const throughputHistory = 150

// record appends a reading; s.mu is held.
func (s *Sampler) record(at time.Time, perSecond float64) {
	s.history = append(s.history, ThroughputPoint{At: at, PerSecond: perSecond})
	if n := len(s.history); n > throughputHistory {
		s.history = append(s.history[:0], s.history[n-throughputHistory:]...)
	}
}

// History returns the kept throughput readings, oldest first.
func (s *Sampler) History() []ThroughputPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ThroughputPoint{}, s.history...)
}

// throughputHandler serves GET /api/throughput: {"points": [...]}.
func throughputHandler(s *Sampler) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"points": s.History()})
	}
}
