package model

import (
	"errors"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/internal/errtext"
)

// UUID is the 16 raw bytes of an RFC 4122 UUID in network order, the bytes
// FlowFabric hashes to pick a partition.
type UUID [16]byte

// NewUUID returns a random version-4 UUID.
func NewUUID() UUID {
	var u UUID
	if err := randomBytes(u[:]); err != nil {
		panic("model: crypto/rand failed: " + err.Error())
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// ErrInvalidUUID is returned for text that is not a canonical hyphenated UUID.
var ErrInvalidUUID = errors.New("model: invalid uuid")

// ParseUUID parses the canonical 36-character hyphenated form (any version,
// either case).
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, errtext.Wrap(ErrInvalidUUID, ErrInvalidUUID.Error()+": "+errtext.Q(s))
	}
	n := 0
	for i := 0; i < len(s); i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i--
			continue
		}
		hi, lo := unhex(s[i]), unhex(s[i+1])
		if hi > 15 || lo > 15 {
			return UUID{}, errtext.Wrap(ErrInvalidUUID, ErrInvalidUUID.Error()+": "+errtext.Q(s))
		}
		u[n] = hi<<4 | lo
		n++
	}
	return u, nil
}

// MustParseUUID is ParseUUID that panics; for constants and tests.
func MustParseUUID(s string) UUID {
	u, err := ParseUUID(s)
	if err != nil {
		panic(err)
	}
	return u
}

// String renders the lowercase hyphenated form.
func (u UUID) String() string {
	const digits = "0123456789abcdef"
	var b [36]byte
	n := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[n] = '-'
			n++
		}
		b[n], b[n+1] = digits[c>>4], digits[c&15]
		n += 2
	}
	return string(b[:])
}

// unhex returns the value of hex digit c (either case), or 255.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}

// IsZero reports the nil UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// ExecutionID is FlowFabric's execution id, "{fp:N}:<uuid>". The partition is
// embedded in the id and never re-hashed.
type ExecutionID string

// Errors returned by ParseExecutionID.
var (
	ErrExecIDMissingTag   = errors.New("model: execution id must start with {fp:N}:")
	ErrExecIDInvalidIndex = errors.New("model: execution id partition index is not a u16")
	ErrExecIDInvalidUUID  = errors.New("model: execution id uuid is invalid")
)

// ParseExecutionID validates s as "{fp:N}:<uuid>" and returns it verbatim.
// It does not check N against the configured partition count.
func ParseExecutionID(s string) (ExecutionID, error) {
	if !strings.HasPrefix(s, "{fp:") {
		return "", errtext.Wrap(ErrExecIDMissingTag, ErrExecIDMissingTag.Error()+": "+errtext.Q(s))
	}
	end := strings.Index(s, "}:")
	if end < 0 {
		return "", errtext.Wrap(ErrExecIDMissingTag, ErrExecIDMissingTag.Error()+": "+errtext.Q(s))
	}
	if _, err := strconv.ParseUint(s[4:end], 10, 16); err != nil {
		return "", errtext.Wrap(ErrExecIDInvalidIndex, ErrExecIDInvalidIndex.Error()+": "+errtext.Q(s))
	}
	if _, err := ParseUUID(s[end+2:]); err != nil {
		return "", errtext.Wrap(ErrExecIDInvalidUUID, ErrExecIDInvalidUUID.Error()+": "+errtext.Q(s))
	}
	return ExecutionID(s), nil
}

// NewExecutionID mints an execution id on partition p with uuid u.
func NewExecutionID(p Partition, u UUID) ExecutionID {
	return ExecutionID("{fp:" + strconv.FormatUint(uint64(p.Index), 10) + "}:" + u.String())
}

// NewSoloExecutionID mints a fresh id for an execution outside any flow; its
// partition is derived from the lane.
func (c PartitionConfig) NewSoloExecutionID(lane string) ExecutionID {
	return NewExecutionID(c.SoloPartition(lane), NewUUID())
}

// NewFlowExecutionID mints a fresh id for a member of flow; it lands on the
// flow's partition so flow and member keys share a slot.
func (c PartitionConfig) NewFlowExecutionID(flow UUID) ExecutionID {
	return NewExecutionID(c.FlowPartition(flow), NewUUID())
}

// Partition decodes the {fp:N} prefix. An id that does not parse yields
// partition 0; validate untrusted ids with ParseExecutionID first.
func (id ExecutionID) Partition() Partition {
	s := string(id)
	end := strings.Index(s, "}:")
	if !strings.HasPrefix(s, "{fp:") || end < 0 {
		return Partition{Family: FamilyFlow}
	}
	n, _ := strconv.ParseUint(s[4:end], 10, 16)
	return Partition{Family: FamilyFlow, Index: uint16(n)}
}

// UUIDString returns the uuid part of the id.
func (id ExecutionID) UUIDString() string {
	s := string(id)
	if end := strings.Index(s, "}:"); end >= 0 {
		return s[end+2:]
	}
	return s
}

// String returns the id text.
func (id ExecutionID) String() string { return string(id) }
