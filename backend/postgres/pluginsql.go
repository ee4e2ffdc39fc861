package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/hostseam"
	"github.com/fabric-host/fabric/model"
)

// This file is the Postgres side of the sql_query host function: package
// host/hostfn runs plugins' catalog statements through PluginSQL, which
// speaks the plugin ABI's types (hostseam.PluginSQL), so the host never
// names pgx.

// PluginSQL is hostseam.PluginSQL on a pool.
type PluginSQL struct{ Pool *pgxpool.Pool }

var _ hostseam.PluginSQL = PluginSQL{}

// PluginSQL returns the sql_query database of c's pool (host.Config's
// Postgres).
func (c *Client) PluginSQL() PluginSQL { return PluginSQL{Pool: c.pool} }

// BeginPluginTx implements hostseam.PluginSQL.
func (s PluginSQL) BeginPluginTx(ctx context.Context) (hostseam.PluginTx, error) {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return nil, sqlError(err)
	}
	return pluginTx{tx}, nil
}

// InPluginTx implements hostseam.PluginSQL (pgx.BeginFunc).
func (s PluginSQL) InPluginTx(ctx context.Context, fn func(hostseam.PluginTx) error) error {
	return sqlError(pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return fn(pluginTx{tx}) }))
}

// QueryAlone implements hostseam.PluginSQL on a pooled connection: the
// statement runs in Postgres's implicit transaction of its own.
func (s PluginSQL) QueryAlone(ctx context.Context, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error) {
	return query(ctx, s.Pool, sql, params, maxRows)
}

// pluginTx is hostseam.PluginTx on a pgx transaction.
type pluginTx struct{ tx pgx.Tx }

// Commit implements hostseam.PluginTx.
func (t pluginTx) Commit(ctx context.Context) error { return sqlError(t.tx.Commit(ctx)) }

// Rollback implements hostseam.PluginTx.
func (t pluginTx) Rollback(ctx context.Context) error { return sqlError(t.tx.Rollback(ctx)) }

// Query implements hostseam.PluginTx: params bind as int8, text, bool and
// float8; cells come back through sqlValue.
func (t pluginTx) Query(ctx context.Context, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error) {
	return query(ctx, t.tx, sql, params, maxRows)
}

// query runs sql on q (a transaction or the pool) with params bound as
// int8, text, bool and float8; cells come back through sqlValue.
func query(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, params []abi.SQLValue, maxRows int) (abi.SQLResult, error) {
	args := make([]any, len(params))
	for i, p := range params {
		switch p.Kind {
		case abi.SQLInt:
			args[i] = p.Int
		case abi.SQLText:
			args[i] = p.Text
		case abi.SQLBool:
			args[i] = p.Bool
		case abi.SQLFloat:
			args[i] = p.F
		}
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return abi.SQLResult{}, sqlError(err)
	}
	defer rows.Close()
	var res abi.SQLResult
	for _, f := range rows.FieldDescriptions() {
		res.Columns = append(res.Columns, f.Name)
	}
	for rows.Next() {
		if len(res.Rows) >= maxRows {
			return abi.SQLResult{}, hostseam.ErrRowLimit
		}
		vals, err := rows.Values()
		if err != nil {
			return abi.SQLResult{}, sqlError(err)
		}
		row := make([]abi.SQLValue, len(vals))
		for i, v := range vals {
			row[i] = sqlValue(v)
		}
		res.Rows = append(res.Rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return abi.SQLResult{}, sqlError(err)
	}
	res.RowsAffected = rows.CommandTag().RowsAffected()
	return res, nil
}

// sqlError wraps a server error as a *hostseam.SQLError (its SQLSTATE and
// message); any other error, nil included, is returned as is.
func sqlError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		var se *hostseam.SQLError
		if errors.As(err, &se) {
			return err
		}
		return &hostseam.SQLError{Code: pe.Code, Message: pe.Message, Err: err}
	}
	return err
}

// sqlValue converts a pgx-decoded cell to the ABI's scalar kinds.
func sqlValue(v any) abi.SQLValue {
	switch x := v.(type) {
	case nil:
		return abi.Null()
	case int16:
		return abi.Int64(int64(x))
	case int32:
		return abi.Int64(int64(x))
	case int64:
		return abi.Int64(x)
	case int:
		return abi.Int64(int64(x))
	case string:
		return abi.Text(x)
	case []byte:
		return abi.Text(string(x))
	case bool:
		return abi.Bool(x)
	case float32:
		return abi.SQLValue{Kind: abi.SQLFloat, F: float64(x)}
	case float64:
		return abi.SQLValue{Kind: abi.SQLFloat, F: x}
	case [16]byte:
		return abi.Text(model.UUID(x).String())
	}
	if b, err := json.Marshal(v); err == nil {
		return abi.Text(string(b))
	}
	return abi.Text(fmt.Sprint(v))
}
