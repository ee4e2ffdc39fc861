package valkey

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model/fcall"
)

// Reply is a successful ff_* reply: {1, Status, Fields...}. Status is "OK"
// or one of the alternative success statuses (ALREADY_SATISFIED, DUPLICATE,
// ALREADY_APPLIED, HARD_BREACH, SOFT_BREACH). It is model/fcall's Reply,
// the shape its decoders read.
type Reply = fcall.Reply

// ErrorCode is a logical error code returned by the flowfabric library in
// {0, code, details...}. A *LuaError matches its code with errors.Is, so
// callers write errors.Is(err, valkey.CodeStaleLease).
type ErrorCode string

// Error returns the code.
func (c ErrorCode) Error() string { return string(c) }

// FlowFabricCode implements backend.CodedError: the code itself.
func (c ErrorCode) FlowFabricCode() string { return string(c) }

// LuaError is a logical error reply from an ff_* function.
type LuaError struct {
	// Function is the ff_* function that replied.
	Function string
	// Code is the error code, e.g. "stale_lease".
	Code ErrorCode
	// Details are the reply's remaining elements.
	Details []string
}

// Error renders "ff_x: code (details)".
func (e *LuaError) Error() string {
	if len(e.Details) == 0 {
		return e.Function + ": " + string(e.Code)
	}
	return e.Function + ": " + string(e.Code) + " (" + strings.Join(e.Details, ", ") + ")"
}

// Unwrap returns the code, so errors.Is(err, CodeX) works.
func (e *LuaError) Unwrap() error { return e.Code }

// EndedBy implements backend.EndedError: an execution_not_active reply
// names the outcome, lease epoch and attempt id that ended the execution
// (details 0, 1 and 3), so a repeat of a lease-ending call whose first
// reply was lost can tell its own ending.
func (e *LuaError) EndedBy(f backend.Fence, outcome string) bool {
	return e.Code == CodeExecutionNotActive && outcome != "" && e.Detail(0) == outcome &&
		e.Detail(1) == strconv.FormatUint(f.LeaseEpoch, 10) && e.Detail(3) == f.AttemptID
}

// Detail returns detail i or "".
func (e *LuaError) Detail(i int) string {
	if i < 0 || i >= len(e.Details) {
		return ""
	}
	return e.Details[i]
}

// CodeOf returns the ErrorCode of a *LuaError anywhere in err's chain, or "".
func CodeOf(err error) ErrorCode {
	var le *LuaError
	if errors.As(err, &le) {
		return le.Code
	}
	return ""
}

// ErrMalformedReply is returned when a reply does not have the library's
// {code, status, fields...} shape.
var ErrMalformedReply = errors.New("valkey: malformed ff_* reply")

// parseReply decodes the library's result convention.
func parseReply(fn string, msg vk.ValkeyMessage) (*Reply, error) {
	ok, status, fields, err := replyParts(fn, msg)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, &LuaError{Function: fn, Code: ErrorCode(status), Details: fields}
	}
	return &Reply{Status: status, Fields: fields}, nil
}

// replyParts splits a reply of the library's result convention: ok on
// {1, status, fields...}, !ok on {0, code, details...} (status is the
// code); err when the reply is not of that shape (ErrMalformedReply).
func replyParts(fn string, msg vk.ValkeyMessage) (ok bool, status string, fields []string, err error) {
	arr, err := msg.ToArray()
	if err != nil {
		return false, "", nil, fmt.Errorf("%w from %s: %v", ErrMalformedReply, fn, err)
	}
	if len(arr) < 2 {
		return false, "", nil, fmt.Errorf("%w from %s: %d elements", ErrMalformedReply, fn, len(arr))
	}
	code, err := arr[0].AsInt64()
	if err != nil {
		return false, "", nil, fmt.Errorf("%w from %s: element 0 is not an integer", ErrMalformedReply, fn)
	}
	status, err = arr[1].ToString()
	if err != nil {
		return false, "", nil, fmt.Errorf("%w from %s: element 1 is not a string", ErrMalformedReply, fn)
	}
	fields = make([]string, 0, len(arr)-2)
	for _, m := range arr[2:] {
		fields = append(fields, messageString(m))
	}
	return code == 1, status, fields, nil
}

// messageString renders any scalar reply element as text.
func messageString(m vk.ValkeyMessage) string {
	if s, err := m.ToString(); err == nil {
		return s
	}
	if n, err := m.AsInt64(); err == nil {
		return strconv.FormatInt(n, 10)
	}
	if f, err := m.AsFloat64(); err == nil {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	if m.IsNil() {
		return ""
	}
	return fmt.Sprint(m)
}
