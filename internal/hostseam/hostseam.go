// Package hostseam holds the plugin-facing part of what the host (package
// host) needs of a backend: plugin data in the plugin ABI's own types and
// the plugin SQL transaction, so that the host names no driver package
// while the backend contract (package backend), which every SDK user
// compiles, does not import the plugin ABI. The rest of the host's seam,
// free of the ABI, is backend/hostside.go. The drivers implement these
// interfaces; cmd/fabric hands them to the host.
package hostseam

import (
	"context"
	"errors"

	"github.com/fabric-host/fabric/abi"
)

// PluginData is the plugin data the host functions (package host/hostfn)
// read and call through, in the plugin ABI's own types so that the host
// names no driver: backend/valkey.PluginStore implements it. Every method
// is safe for concurrent use and takes the plugin call's context (its
// deadline bounds the backend call).
type PluginData interface {
	// FCallBatch runs calls in one pipeline. results[i] is calls[i]'s
	// outcome as the fcall host function reports it (StatusOK with the
	// reply, StatusLuaError with the library's code and details,
	// StatusError with the error's text); Item is not looked at.
	FCallBatch(ctx context.Context, calls []abi.Call) []abi.CallResult
	// HMGet reads fields of the hash at key (absent ones not Present).
	HMGet(ctx context.Context, key string, fields []string) ([]abi.Field, error)
	// ZRangeByScore reads a sorted set by score, with LIMIT.
	ZRangeByScore(ctx context.Context, req abi.ZRangeRequest) (abi.Members, error)
	// SMembers reads a set.
	SMembers(ctx context.Context, key string) ([]string, error)
	// SScan reads one page of a set.
	SScan(ctx context.Context, req abi.ScanCursorRequest) (abi.ScanCursorResponse, error)
}

// PluginCommands is the optional part of PluginData serving the read and
// write host functions (ABI 1.1): one validated abi command each.
type PluginCommands interface {
	// Read runs one validated abi read op.
	Read(ctx context.Context, req *abi.CommandRequest) ([]string, error)
	// Write runs one validated abi write op.
	Write(ctx context.Context, req *abi.CommandRequest) (int64, error)
}

// PluginReadBatch is the optional part of PluginData serving the read
// host function: a pipelined batch of read-only commands, each reply
// flattened as abi.ReadResult describes.
type PluginReadBatch interface {
	ReadBatch(ctx context.Context, ops []abi.ReadOp) []abi.ReadResult
}

// PluginDataSource is a backend client that serves plugin data: the host
// takes its Store from a Backend that is one (*valkey.Client).
type PluginDataSource interface {
	PluginData() PluginData
}

// PluginSQL is the database the sql_query host function runs plugins'
// catalog statements on: backend/postgres.PluginSQL implements it.
type PluginSQL interface {
	// BeginPluginTx begins a transaction the caller ends with Commit or
	// Rollback.
	BeginPluginTx(ctx context.Context) (PluginTx, error)
	// InPluginTx runs fn in a transaction of its own: committed when fn
	// returns nil, rolled back (and fn's error returned) otherwise.
	InPluginTx(ctx context.Context, fn func(PluginTx) error) error
	// QueryAlone runs one statement outside any transaction the caller
	// opens (as PluginTx.Query does): the statement is its own
	// transaction, one round trip without BEGIN and COMMIT.
	QueryAlone(ctx context.Context, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error)
}

// PluginTx is one open transaction of PluginSQL. Not safe for concurrent
// use.
type PluginTx interface {
	// Query runs one statement with params bound in order and returns
	// its columns, rows (each cell as the ABI's scalar kinds) and rows
	// affected. More than maxRows rows is ErrRowLimit.
	Query(ctx context.Context, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// ErrRowLimit: a PluginTx statement returned more rows than its cap.
var ErrRowLimit = errors.New("backend: statement returned more rows than its cap")

// SQLError is a statement's failure as the database reported it, its
// SQLSTATE and message; Err is the driver's own error (a
// *pgconn.PgError), whose text Error returns.
type SQLError struct {
	Code, Message string
	Err           error
}

// Error returns the driver error's text.
func (e *SQLError) Error() string { return e.Err.Error() }

// Unwrap returns the driver's error.
func (e *SQLError) Unwrap() error { return e.Err }
