package partlease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fabric-host/fabric/internal/testsignal"
)

// Defaults.
const (
	// TTLDefault is Config.TTL's default: a dead host's partitions are
	// taken over at most this long after its last renewal.
	TTLDefault = 10 * time.Second
	// TTLMin is the shortest TTL Validate accepts.
	TTLMin = 100 * time.Millisecond
	// HostIDMaxLen bounds a host id.
	HostIDMaxLen = 128
)

// Config configures a Manager. Zero fields take the defaults; see
// WithDefaults.
type Config struct {
	// Disabled turns partition leases off: the host scans every partition
	// of every family, as each FlowFabric engine does. Use it for a host
	// that is alone by construction; two such hosts do all the work twice.
	Disabled bool
	// HostID names this host in leases and membership (default
	// "<hostname>-<pid>-<4 random hex>"). Two live hosts must never share
	// one: each would renew the other's leases. No whitespace.
	HostID string
	// TTL is the lifetime of a partition lease and of the membership
	// record (default 10 s): the longest a dead host's partitions go
	// unscanned.
	TTL time.Duration
	// RenewEvery is the heartbeat and renewal period (default TTL/3).
	RenewEvery time.Duration
	// RetryEvery is the step period while part of this host's share is
	// still held by a peer, a hand-off in progress (default TTL/20).
	RetryEvery time.Duration
	// Margin is kept between the end of any partition call and the local
	// expiry of its lease, for clock-rate drift and requests still in
	// flight when a call's deadline fires (default TTL/10).
	Margin time.Duration
	// Signals receives test signals. Nil in production.
	Signals *Signals
}

// Signals are the edges tests wait on instead of sleeping.
type Signals struct {
	// Step fires after every step (RunOnce, including Run's).
	Step testsignal.TestSignal[StepResult]
}

// Init arms every signal.
func (s *Signals) Init() { s.Step.Init() }

// WithDefaults fills the defaults and validates the result.
func (c Config) WithDefaults() (Config, error) {
	if c.HostID == "" {
		c.HostID = DefaultHostID()
	}
	if c.TTL == 0 {
		c.TTL = TTLDefault
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.RetryEvery == 0 {
		c.RetryEvery = c.TTL / 20
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 10
	}
	return c, c.Validate()
}

// Validate reports a configuration that cannot keep leases safe.
func (c Config) Validate() error {
	var errs []error
	if c.HostID == "" || len(c.HostID) > HostIDMaxLen || strings.ContainsAny(c.HostID, " \t\r\n") {
		errs = append(errs, fmt.Errorf("host id %q: want 1..%d characters without whitespace", c.HostID, HostIDMaxLen))
	}
	if c.TTL < TTLMin {
		errs = append(errs, fmt.Errorf("lease TTL %s: want at least %s", c.TTL, TTLMin))
	}
	if c.RenewEvery <= 0 || c.RenewEvery > c.TTL/2 {
		errs = append(errs, fmt.Errorf("renew period %s: want > 0 and at most half the TTL (%s)", c.RenewEvery, c.TTL/2))
	}
	if c.RetryEvery <= 0 || c.RetryEvery > c.RenewEvery {
		errs = append(errs, fmt.Errorf("retry period %s: want > 0 and at most the renew period (%s)", c.RetryEvery, c.RenewEvery))
	}
	if c.Margin < 0 || c.Margin >= c.TTL/2 {
		errs = append(errs, fmt.Errorf("margin %s: want >= 0 and below half the TTL (%s)", c.Margin, c.TTL/2))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("partlease: %w", err)
	}
	return nil
}

// DefaultHostID returns "<hostname>-<pid>-<4 random hex>": unique per
// process, readable in `fabric status`.
func DefaultHostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "host"
	}
	name = strings.Map(func(r rune) rune {
		if r <= ' ' {
			return '_'
		}
		return r
	}, name)
	if len(name) > 64 {
		name = name[:64]
	}
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", name, os.Getpid(), hex.EncodeToString(b))
}
