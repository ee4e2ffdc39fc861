package abi

import "strconv"

// Code is the canonical status of a host-function call, the first byte of
// every envelope. A Code is also an error, so errors.Is(err, abi.CodeDenied)
// matches an *Error carrying it.
type Code uint8

// Status codes. Values are part of the ABI: never renumber, only append.
const (
	// CodeOK: the call succeeded; the envelope's body is the response.
	CodeOK Code = 0
	// CodeDenied: the plugin's manifest does not grant the capability the
	// call needs (function, key family or statement).
	CodeDenied Code = 1
	// CodeBadRequest: the request did not decode or broke a rule of its
	// message (empty key, negative count).
	CodeBadRequest Code = 2
	// CodeBackend: the backend failed (connection, server error).
	CodeBackend Code = 3
	// CodeDeadline: the call's deadline passed or the host is stopping.
	CodeDeadline Code = 4
	// CodeCrossPartition: a key does not carry the hash tag of the partition
	// being scanned.
	CodeCrossPartition Code = 5
	// CodeLimit: the request exceeds a host limit (batch too large).
	CodeLimit Code = 6
	// CodeUnavailable: the host function exists in the table but this host
	// has no implementation for it (for example SQL without Postgres).
	CodeUnavailable Code = 7
	// CodeBudget: the plugin spent its host-call or backend-command budget
	// (per sweep or per second); the plugin call is a fault once it
	// returns.
	CodeBudget Code = 8
	// CodeDryRun: the plugin runs as a shadow (ABI 1.2.1): the host
	// recorded the write (a write op or a writing SQL batch) and did not
	// send it.
	CodeDryRun Code = 9
)

var codeNames = [...]string{
	CodeOK:             "ok",
	CodeDenied:         "denied",
	CodeBadRequest:     "bad_request",
	CodeBackend:        "backend",
	CodeDeadline:       "deadline",
	CodeCrossPartition: "cross_partition",
	CodeLimit:          "limit",
	CodeUnavailable:    "unavailable",
	CodeBudget:         "over_budget",
	CodeDryRun:         "dry_run",
}

// String returns the code's snake_case name.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "code_" + strconv.Itoa(int(c))
}

// Error makes a Code usable as a sentinel error.
func (c Code) Error() string { return "abi: " + c.String() }

// Error is a failed host-function call as the plugin sees it: a code and a
// message saying why. It matches its Code with errors.Is.
type Error struct {
	Code    Code
	Message string
}

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// Error renders "abi: denied: message".
func (e *Error) Error() string { return "abi: " + e.Code.String() + ": " + e.Message }

// Unwrap returns the code.
func (e *Error) Unwrap() error { return e.Code }
