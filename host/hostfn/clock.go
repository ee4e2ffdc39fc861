package hostfn

import (
	"context"

	"github.com/fabric-host/fabric/abi"
)

// nowFunction answers server time in milliseconds, or the negated Code of
// a failure (the one host function without an envelope: it is the round
// trip scanners make every tick).
func nowFunction(cfg Config) callback {
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		if c.begin(0) != nil {
			stack[0] = uint64(codeNeg(abi.CodeBudget))
			return
		}
		if cfg.Now == nil {
			stack[0] = uint64(codeNeg(abi.CodeUnavailable))
			return
		}
		ms, err := cfg.Now(ctx)
		if c.FixedNow > 0 {
			ms, err = c.FixedNow, nil
		}
		switch {
		case err != nil && ctx.Err() != nil:
			ms = codeNeg(abi.CodeDeadline)
		case err != nil:
			c.Logger.Warn("plugin clock read failed", "plugin", c.Plugin, "error", err)
			ms = codeNeg(abi.CodeBackend)
		}
		if err == nil && c.OnNow != nil {
			c.OnNow(ms)
		}
		stack[0] = uint64(ms)
	}
}

func codeNeg(c abi.Code) int64 { return -int64(c) }
