package hostfn

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestGuestLevel: a guest's warning from a call the host cut by stopping
// is written at debug; the same warning from a live call, or from a call
// past its deadline, still warns; lower levels are kept.
func TestGuestLevel(t *testing.T) {
	live := context.Background()
	stopped, stop := context.WithCancelCause(live)
	stop(errors.New("host stopping"))
	late, cancel := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		in, want slog.Level
	}{
		{"LiveWarn", live, slog.LevelWarn, slog.LevelWarn},
		{"LiveError", live, slog.LevelError, slog.LevelError},
		{"StoppedWarn", stopped, slog.LevelWarn, slog.LevelDebug},
		{"StoppedError", stopped, slog.LevelError, slog.LevelDebug},
		{"StoppedInfo", stopped, slog.LevelInfo, slog.LevelInfo},
		{"DeadlineWarn", late, slog.LevelWarn, slog.LevelWarn},
	} {
		if got := guestLevel(tc.ctx, tc.in); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
