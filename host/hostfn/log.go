package hostfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fabric-host/fabric/abi"
)

func logFunction(cfg Config) callback {
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		if c.beginLog() != nil {
			return // dropped: the call is over budget
		}
		b, _, err := blockView(ctx, stack[1])
		if err != nil {
			panic(fmt.Sprintf("hostfn log: abi violation: message pointer %#x: %v", stack[1], err))
		}
		// Only what is logged is copied out of the plugin's memory.
		msg := string(b[:min(len(b), cfg.MaxLogBytes)])
		if len(b) > cfg.MaxLogBytes {
			msg += "…"
		}
		level := guestLevel(ctx, slog.Level(int32(uint32(stack[0]))))
		c.Logger.Log(ctx, level, msg, "plugin", c.Plugin, "plugin_version", c.Version, "partition", c.Tag, "source", "guest")
	}
}

// guestLevel is the level a guest's log line is written at: a warning or
// error from a call the host itself cut (its stop, or the plugin's
// unload, cancelled the call's context: the guest then sees its host
// calls fail with "context canceled") is no failure of the plugin's and
// is written at debug. A call that ran out of time (its deadline) still
// warns, as does anything a live call logs.
func guestLevel(ctx context.Context, level slog.Level) slog.Level {
	if level >= slog.LevelWarn && errors.Is(ctx.Err(), context.Canceled) {
		return slog.LevelDebug
	}
	return level
}

func metricFunction() callback {
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		if c.begin(0) != nil {
			return // dropped: the call is over budget
		}
		in, _, err := blockView(ctx, stack[0]) // decoding copies what it keeps
		if err != nil {
			panic(fmt.Sprintf("hostfn metric: abi violation: pointer %#x: %v", stack[0], err))
		}
		var m abi.Metric
		if err := m.UnmarshalBinary(in); err != nil {
			c.Logger.Warn("plugin sent a malformed metric", "plugin", c.Plugin, "error", err)
			return
		}
		c.Stats.metric(m)
	}
}
