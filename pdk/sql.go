package pdk

import (
	"reflect"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/errtext"
	"github.com/fabric-host/fabric/model/sqlstmt"
)

// SQLHost is the Postgres side of a host: the sql_query host function.
// The wasm host implements it; so does a native test host that embeds a
// pdktest.Host and a hostfn.SQLSession. Reach it with SQLOf.
type SQLHost interface {
	// SQL runs one sql_query request (see abi.SQLOp).
	SQL(req abi.SQLRequest) (abi.SQLResponse, error)
}

// SQLOf returns h's SQL side, or a CodeUnavailable error when h has none.
func SQLOf(h Host) (SQLHost, error) {
	if s, ok := h.(SQLHost); ok {
		return s, nil
	}
	return nil, abi.Errorf(abi.CodeUnavailable, "host has no sql_query")
}

// Q binds args to statement s of the catalog (a pgsql.Statement; the type
// lives in model/sqlstmt so the pdk does not link the catalog). Args may
// be nil (NULL), int, int16, int32, int64, uint16, uint32, string, bool,
// float64 or an abi.SQLValue.
//
// # Notes
//
//   - Panics on another argument type: a plugin wiring mistake.
func Q(s sqlstmt.Statement, args ...any) abi.SQLStatement {
	ps := make([]abi.SQLValue, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			ps[i] = abi.Null()
		case abi.SQLValue:
			ps[i] = v
		case int:
			ps[i] = abi.Int64(int64(v))
		case int16:
			ps[i] = abi.Int64(int64(v))
		case int32:
			ps[i] = abi.Int64(int64(v))
		case int64:
			ps[i] = abi.Int64(v)
		case uint16:
			ps[i] = abi.Int64(int64(v))
		case uint32:
			ps[i] = abi.Int64(int64(v))
		case string:
			ps[i] = abi.Text(v)
		case bool:
			ps[i] = abi.Bool(v)
		case float64:
			ps[i] = abi.SQLValue{Kind: abi.SQLFloat, F: v}
		default:
			// reflect's type name is fmt's %T (a is not nil here).
			panic("pdk.Q(" + s.Name + "): argument " + errtext.D(i+1) + " has unsupported type " + reflect.TypeOf(a).String())
		}
	}
	return abi.SQLStatement{Name: s.Name, Params: ps}
}

// Exec runs stmts in order: in the open transaction of Tx, else in one
// transaction of their own (all or nothing).
func Exec(s SQLHost, stmts ...abi.SQLStatement) ([]abi.SQLResult, error) {
	resp, err := s.SQL(abi.SQLRequest{Op: abi.SQLExec, Statements: stmts})
	if err != nil {
		return nil, err
	}
	if len(resp.Results) != len(stmts) {
		return nil, abi.Errorf(abi.CodeBackend, "sql: "+errtext.D(len(resp.Results))+" results for "+errtext.D(len(stmts))+" statements")
	}
	return resp.Results, nil
}

// Tx runs fn inside the call's transaction: committed when fn returns
// nil, rolled back when it returns an error. If the plugin traps or
// overruns its deadline inside fn, the host rolls the transaction back.
func Tx(s SQLHost, fn func() error) error {
	if _, err := s.SQL(abi.SQLRequest{Op: abi.SQLBegin}); err != nil {
		return err
	}
	if err := fn(); err != nil {
		// A failed statement has already ended the transaction host-side;
		// the rollback then reports "no open transaction", which is fine.
		s.SQL(abi.SQLRequest{Op: abi.SQLRollback})
		return err
	}
	_, err := s.SQL(abi.SQLRequest{Op: abi.SQLCommit})
	return err
}

// RowScan is the skeleton of a Postgres reconciler: one unlocked
// candidate query, then each candidate handled in its own transaction
// that re-reads it under lock (upstream's per-row transactions).
type RowScan struct {
	// Candidates is the candidate query (run outside any transaction).
	Candidates abi.SQLStatement
	// Handle acts on one candidate row inside its transaction and reports
	// whether it changed anything (false: no longer qualified, counted as
	// skipped). An error rolls the row's transaction back and is counted.
	Handle func(s SQLHost, row []abi.SQLValue) (bool, error)
	// OnError, when set, is told each failure (e.g. to log it).
	OnError func(row []abi.SQLValue, err error)
}

// Run runs the scan on h.
func (r RowScan) Run(h Host) abi.ScanResult {
	var res abi.ScanResult
	s, err := SQLOf(h)
	if err != nil {
		res.Errors++
		return res
	}
	rs, err := Exec(s, r.Candidates)
	if err != nil {
		res.Errors++
		if r.OnError != nil {
			r.OnError(nil, err)
		}
		return res
	}
	for _, row := range rs[0].Rows {
		res.Scanned++
		var acted bool
		err := Tx(s, func() error {
			var err error
			acted, err = r.Handle(s, row)
			return err
		})
		switch {
		case err != nil:
			res.Errors++
			if r.OnError != nil {
				r.OnError(row, err)
			}
		case acted:
			res.Acted++
		default:
			res.Skipped++
		}
	}
	return res
}

// PartitionBatch runs stmt, a catalog statement whose first parameters
// are partition keys and whose others are rest (pgsql.PromoteBatch,
// pgsql.DependencyProbe), over the partitions idxs: one statement per as
// many partitions as it names, each in a transaction of its own, the
// last list padded by repeating its last partition. It returns every row
// the statements returned, in order, and how many of idxs (a prefix) the
// statements that succeeded covered: all of them, or those before the
// statement that failed with err.
func PartitionBatch(s SQLHost, stmt sqlstmt.Statement, idxs []uint16, rest ...any) (rows [][]abi.SQLValue, done int, err error) {
	width := 0
	for width < len(stmt.Params) && stmt.Params[width] == "partition_key" {
		width++
	}
	if width == 0 {
		return nil, 0, abi.Errorf(abi.CodeBadRequest, "pdk.PartitionBatch: "+stmt.Name+" takes no partition keys")
	}
	for off := 0; off < len(idxs); off += width {
		chunk := idxs[off:min(off+width, len(idxs))]
		args := make([]any, 0, width+len(rest))
		for i := range width {
			args = append(args, chunk[min(i, len(chunk)-1)])
		}
		rs, err := Exec(s, Q(stmt, append(args, rest...)...))
		if err != nil {
			return rows, off, err
		}
		rows = append(rows, rs[0].Rows...)
	}
	return rows, len(idxs), nil
}
