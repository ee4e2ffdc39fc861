package host

import "sync"

// Failure-tracker constants (engine spec §6).
const (
	trackerFailureThreshold = 3
	trackerBackoffCycles    = 10
	trackerGCThreshold      = 500
	trackerGCEvery          = 50
)

// FailureTracker keeps an item whose FCALL keeps failing from occupying a
// batch slot forever: after 3 consecutive failures the item is skipped for
// 10 sweeps, then gets one more chance. The host owns one per plugin, so it
// survives instance recycling and hot swaps; fcall consults it for calls
// that carry an item key.
//
// # Notes
//
//   - Safe for concurrent use.
type FailureTracker struct {
	mu    sync.Mutex
	cycle uint64
	items map[string]*trackedItem
	// onBackoff is told when an item enters backoff (for logs).
	onBackoff func(item string, failures int)
}

type trackedItem struct {
	failures  int
	skipUntil uint64
}

// NewFailureTracker returns an empty tracker.
func NewFailureTracker(onBackoff func(item string, failures int)) *FailureTracker {
	return &FailureTracker{items: map[string]*trackedItem{}, onBackoff: onBackoff}
}

// AdvanceCycle starts a sweep; every 50 sweeps, when more than 500 items
// are tracked, it drops every entry not currently in backoff.
func (t *FailureTracker) AdvanceCycle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cycle++
	if t.cycle%trackerGCEvery == 0 && len(t.items) > trackerGCThreshold {
		for k, it := range t.items {
			if !(it.failures >= trackerFailureThreshold && it.skipUntil > t.cycle) {
				delete(t.items, k)
			}
		}
	}
}

// ShouldSkip reports whether item is in backoff; an expired backoff is
// reset and the item gets one more chance.
func (t *FailureTracker) ShouldSkip(item string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.items[item]
	if it == nil || it.failures < trackerFailureThreshold {
		return false
	}
	if it.skipUntil > t.cycle {
		return true
	}
	it.failures, it.skipUntil = 0, 0
	return false
}

// RecordFailure counts a failure; the third in a row starts a backoff.
func (t *FailureTracker) RecordFailure(item string) {
	t.mu.Lock()
	it := t.items[item]
	if it == nil {
		it = &trackedItem{}
		t.items[item] = it
	}
	it.failures++
	started := it.failures == trackerFailureThreshold
	if started {
		it.skipUntil = t.cycle + trackerBackoffCycles
	}
	n := it.failures
	t.mu.Unlock()
	if started && t.onBackoff != nil {
		t.onBackoff(item, n)
	}
}

// RecordSuccess forgets item.
func (t *FailureTracker) RecordSuccess(item string) {
	t.mu.Lock()
	delete(t.items, item)
	t.mu.Unlock()
}

// Len returns the number of tracked items.
func (t *FailureTracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.items)
}
