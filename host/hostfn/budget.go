package hostfn

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// Limits are a plugin's host-call and backend-command budgets; zero
// fields are unlimited. A host call over any of them is refused with
// abi.CodeBudget, and the plugin call that made it is a fault (over
// budget) once it returns.
type Limits struct {
	// CallsPerSweep and CommandsPerSweep bound one sweep (the host calls
	// Budget.NewSweep at every sweep's start).
	CallsPerSweep, CommandsPerSweep int64
	// CallsPerSecond and CommandsPerSecond bound any one-second window.
	CallsPerSecond, CommandsPerSecond int64
}

// Budget meters one plugin's host calls and backend commands against its
// Limits. The zero value is unlimited; safe for concurrent use.
type Budget struct {
	mu     sync.Mutex
	limits Limits
	sweep  [2]int64 // calls, commands since NewSweep
	second [2]int64 // calls, commands in the current window
	window time.Time

	// Refused counts host calls refused for the budget; Commands counts
	// backend commands metered.
	Refused, Commands atomic.Int64
}

// SetLimits replaces the limits (a hot swap may change them).
func (b *Budget) SetLimits(l Limits) {
	b.mu.Lock()
	b.limits = l
	b.mu.Unlock()
}

// NewSweep starts a sweep: the per-sweep counts restart.
func (b *Budget) NewSweep() {
	b.mu.Lock()
	b.sweep = [2]int64{}
	b.mu.Unlock()
}

// take meters one host call carrying cmds backend commands, or refuses it.
func (b *Budget) take(cmds int64) error {
	if b == nil {
		return nil
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.window) >= time.Second {
		b.window, b.second = now, [2]int64{}
	}
	l := b.limits
	over := func(used, n, limit int64, what string) error {
		if limit > 0 && used+n > limit {
			return abi.Errorf(abi.CodeBudget, fmt.Sprintf("%s: budget of %d spent", what, limit))
		}
		return nil
	}
	for _, err := range []error{
		over(b.sweep[0], 1, l.CallsPerSweep, "host calls per sweep"),
		over(b.second[0], 1, l.CallsPerSecond, "host calls per second"),
		over(b.sweep[1], cmds, l.CommandsPerSweep, "backend commands per sweep"),
		over(b.second[1], cmds, l.CommandsPerSecond, "backend commands per second"),
	} {
		if err != nil {
			b.Refused.Add(1)
			return err
		}
	}
	b.sweep[0]++
	b.second[0]++
	b.sweep[1] += cmds
	b.second[1] += cmds
	b.Commands.Add(cmds)
	return nil
}

// begin counts a host call of c carrying cmds backend commands and checks
// it against c's budget; a refusal is remembered on c (OverBudget) and
// counted.
func (c *Caller) begin(cmds int64) error {
	c.Stats.HostCalls.Add(1)
	err := c.Budget.take(cmds)
	if err != nil {
		c.overBudget.CompareAndSwap(nil, err)
	}
	return err
}

// overBudgetLogs is how many log lines a call may still write once it is
// over budget, to say why it stops.
const overBudgetLogs = 4

// beginLog is begin for a log line: once the call is over budget, a few
// lines still pass.
func (c *Caller) beginLog() error {
	err := c.begin(0)
	if err != nil && c.lateLogs.Add(1) <= overBudgetLogs {
		return nil
	}
	return err
}

// OverBudget returns the first budget refusal of c's call (nil: none).
func (c *Caller) OverBudget() error {
	if v := c.overBudget.Load(); v != nil {
		return v.(error)
	}
	return nil
}
