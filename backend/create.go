package backend

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fabric-host/fabric/model"
)

// DefaultMaxPayloadBytes is the largest execution payload a driver
// accepts unless its client is configured otherwise (2 MiB, Temporal's
// payload limit).
const DefaultMaxPayloadBytes = 2 << 20

// ValidateCreateExecution checks p as both drivers do before writing
// anything: a well-formed execution id, a lane, text fields (namespace,
// lane, kind, creator, flow kind, idempotency key, policy, tag keys and
// values) that are valid UTF-8 without NUL, and a payload of at most
// maxPayload bytes (no limit when maxPayload is not positive), and, when
// nowMs is positive, an execution deadline after nowMs (one already past
// would let the execution run to completion past its deadline). Every
// refusal wraps ErrInvalidInput. The drivers pass their clock; the
// clients' raw creates pass 0 and accept a past deadline, which the
// deadline scanners then expire.
func ValidateCreateExecution(p *CreateExecutionParams, maxPayload int, nowMs int64) error {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return fmt.Errorf("%w: create execution: %v", ErrInvalidInput, err)
	}
	if p.LaneID == "" {
		return fmt.Errorf("%w: create execution %s: empty lane", ErrInvalidInput, p.ExecutionID)
	}
	if maxPayload > 0 && len(p.Payload) > maxPayload {
		return fmt.Errorf("%w: create execution %s: payload of %d bytes exceeds the %d-byte limit",
			ErrInvalidInput, p.ExecutionID, len(p.Payload), maxPayload)
	}
	if p.ExecutionDeadlineAt < 0 || p.DelayUntil < 0 {
		return fmt.Errorf("%w: create execution %s: negative delay or deadline", ErrInvalidInput, p.ExecutionID)
	}
	if nowMs > 0 && p.ExecutionDeadlineAt > 0 && p.ExecutionDeadlineAt <= nowMs {
		return fmt.Errorf("%w: create execution %s: execution deadline %d already past (now %d)",
			ErrInvalidInput, p.ExecutionID, p.ExecutionDeadlineAt, nowMs)
	}
	fields := [...]struct{ name, v string }{{"namespace", p.Namespace}, {"lane", p.LaneID},
		{"kind", p.ExecutionKind}, {"creator", p.CreatorIdentity}, {"flow kind", p.FlowKind},
		{"idempotency key", p.IdempotencyKey}, {"policy", p.PolicyJSON}}
	for _, f := range fields {
		if err := validText(f.name, f.v); err != nil {
			return fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
		}
	}
	for k, v := range p.Tags {
		if err := validText("tag key", k); err != nil {
			return fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
		}
		if err := validText("tag "+k, v); err != nil {
			return fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
		}
	}
	return nil
}

// validText refuses text a backend cannot store as sent: invalid UTF-8
// (Postgres would rewrite it to U+FFFD, Valkey keep it raw) or a NUL
// (Postgres text refuses it); in the policy, a JSON document, also the
// escape \u0000 (Postgres jsonb refuses it).
func validText(name, v string) error {
	switch {
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidInput, name)
	case strings.IndexByte(v, 0) >= 0, name == "policy" && strings.Contains(v, `\u0000`):
		return fmt.Errorf("%w: %s contains NUL", ErrInvalidInput, name)
	}
	return nil
}

// PayloadLimit is the payload cap of a client configured with
// MaxPayloadBytes n: DefaultMaxPayloadBytes for 0, none (0) for a
// negative n, else n.
func PayloadLimit(n int) int {
	switch {
	case n == 0:
		return DefaultMaxPayloadBytes
	case n < 0:
		return 0
	}
	return n
}
