package sdk

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidInput is wrapped by every validation error the SDK returns
// before talking to the server, so callers can tell bad input from
// backend failures with errors.Is.
var ErrInvalidInput = errors.New("sdk: invalid input")

// Validation limits, FlowFabric's.
const (
	// LaneIDMaxBytes is the longest lane id (LANE_ID_MAX_BYTES).
	LaneIDMaxBytes = 64
	// MaxPriority is the highest priority; the library clamps to 0..9000.
	MaxPriority = 9000
	// CapsMaxTokens and CapsMaxBytes bound a capability set (CAPS_MAX_*).
	CapsMaxTokens = 256
	CapsMaxBytes  = 4096
)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidInput, field, fmt.Sprintf(format, args...))
}

// ValidateLane checks a lane id the way FlowFabric's LaneId::try_new does:
// non-empty, at most 64 bytes, every byte printable ASCII (0x20..0x7e).
func ValidateLane(lane string) error {
	if lane == "" {
		return invalid("lane", "must not be empty")
	}
	if len(lane) > LaneIDMaxBytes {
		return invalid("lane", "%d bytes exceeds the %d-byte limit", len(lane), LaneIDMaxBytes)
	}
	for i := 0; i < len(lane); i++ {
		if b := lane[i]; b < 0x20 || b > 0x7e {
			return invalid("lane", "byte 0x%02x at offset %d is not printable ASCII (0x20..0x7e)", b, i)
		}
	}
	return nil
}

// validateCapabilities checks capability tokens the way the library and
// FlowFabric's worker connect do: non-empty, no comma (the CSV
// delimiter), no whitespace or control bytes, and the set within
// CapsMaxTokens tokens and CapsMaxBytes bytes of CSV.
func validateCapabilities(field string, caps []string) error {
	total := 0
	seen := make(map[string]bool, len(caps))
	for _, c := range caps {
		if c == "" {
			return invalid(field, "capability token must not be empty")
		}
		if strings.Contains(c, ",") {
			return invalid(field, "capability %q contains ',' (the CSV delimiter)", c)
		}
		for i := 0; i < len(c); i++ {
			if b := c[i]; b <= 0x20 || b == 0x7f {
				return invalid(field, "capability %q contains whitespace or a control byte", c)
			}
		}
		if !seen[c] {
			seen[c] = true
			total += len(c) + 1
		}
	}
	if len(seen) > CapsMaxTokens {
		return invalid(field, "%d capabilities exceed the limit of %d", len(seen), CapsMaxTokens)
	}
	if total > 0 && total-1 > CapsMaxBytes {
		return invalid(field, "capability CSV of %d bytes exceeds %d", total-1, CapsMaxBytes)
	}
	return nil
}
