package abi

import (
	"strconv"

	"github.com/fabric-host/fabric/internal/errtext"
)

// Message tags of the sql_query host function.
const (
	tagSQLRequest  = 0xC1
	tagSQLResponse = 0xC2
)

// SQLOp is what one sql_query call does.
type SQLOp uint8

// SQL operations.
//
// A call without an open transaction (SQLExec) runs its statements in one
// transaction of their own: all commit, or none (the first failure rolls
// the batch back). SQLBegin opens the plugin call's transaction; until
// SQLCommit or SQLRollback every SQLExec runs inside it, so a plugin can
// read under lock, decide, and write (upstream's per-row reconciler
// transactions). A transaction still open when the plugin call ends —
// returned, trapped or killed at its deadline — is rolled back.
const (
	SQLExec     SQLOp = 0
	SQLBegin    SQLOp = 1
	SQLCommit   SQLOp = 2
	SQLRollback SQLOp = 3
)

// SQLKind is the type of an SQLValue.
type SQLKind uint8

// SQL value kinds.
const (
	SQLNull  SQLKind = 0
	SQLInt   SQLKind = 1
	SQLText  SQLKind = 2
	SQLBool  SQLKind = 3
	SQLFloat SQLKind = 4
)

// SQLValue is one bound parameter or result cell.
type SQLValue struct {
	Kind SQLKind
	Int  int64
	Text string
	Bool bool
	F    float64
}

// Int64 is an SQLInt value.
func Int64(v int64) SQLValue { return SQLValue{Kind: SQLInt, Int: v} }

// Text is an SQLText value.
func Text(s string) SQLValue { return SQLValue{Kind: SQLText, Text: s} }

// Bool is an SQLBool value.
func Bool(b bool) SQLValue { return SQLValue{Kind: SQLBool, Bool: b} }

// Null is the SQL NULL.
func Null() SQLValue { return SQLValue{} }

// IsNull reports SQL NULL.
func (v SQLValue) IsNull() bool { return v.Kind == SQLNull }

// AsInt returns the value as an integer (a numeric text is parsed; NULL
// and anything else are 0).
func (v SQLValue) AsInt() int64 {
	switch v.Kind {
	case SQLInt:
		return v.Int
	case SQLFloat:
		return int64(v.F)
	case SQLText:
		n, _ := strconv.ParseInt(v.Text, 10, 64)
		return n
	case SQLBool:
		if v.Bool {
			return 1
		}
	}
	return 0
}

// String returns the value as text ("" for NULL).
func (v SQLValue) String() string {
	switch v.Kind {
	case SQLInt:
		return strconv.FormatInt(v.Int, 10)
	case SQLText:
		return v.Text
	case SQLBool:
		return strconv.FormatBool(v.Bool)
	case SQLFloat:
		return strconv.FormatFloat(v.F, 'g', -1, 64)
	}
	return ""
}

func (v SQLValue) appendTo(e *Encoder) {
	e.Byte(byte(v.Kind))
	switch v.Kind {
	case SQLInt:
		e.Varint(v.Int)
	case SQLText:
		e.String(v.Text)
	case SQLBool:
		e.Bool(v.Bool)
	case SQLFloat:
		e.Float64(v.F)
	}
}

func decodeSQLValue(d *Decoder) SQLValue {
	v := SQLValue{Kind: SQLKind(d.Byte())}
	switch v.Kind {
	case SQLNull:
	case SQLInt:
		v.Int = d.Varint()
	case SQLText:
		v.Text = d.String()
	case SQLBool:
		v.Bool = d.Bool()
	case SQLFloat:
		v.F = d.Float64()
	default:
		d.fail("sql value kind " + errtext.U(v.Kind))
	}
	return v
}

// decodeSQLStatement reads one statement of an SQLRequest.
func decodeSQLStatement(d *Decoder) SQLStatement {
	s := SQLStatement{Name: d.String()}
	if params := decodeList(d, 1, decodeSQLValue); len(params) > 0 {
		s.Params = params
	}
	return s
}

// decodeSQLResult reads one result of an SQLResponse.
func decodeSQLResult(d *Decoder) SQLResult {
	res := SQLResult{Columns: d.Strings(), RowsAffected: d.Varint()}
	rows := decodeList(d, 1, func(d *Decoder) []SQLValue { return decodeList(d, 1, decodeSQLValue) })
	if len(rows) > 0 {
		res.Rows = rows
	}
	return res
}

// SQLStatement is one named statement with its bound parameters.
type SQLStatement struct {
	// Name is a statement of the host's catalog (model/pgsql).
	Name   string
	Params []SQLValue
}

// SQLRequest is the request of sql_query.
type SQLRequest struct {
	Op SQLOp
	// Statements run in order (SQLExec only).
	Statements []SQLStatement
}

// MarshalBinary encodes the request.
func (r *SQLRequest) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 64))
	e.Byte(tagSQLRequest)
	e.Byte(byte(r.Op))
	e.Uvarint(uint64(len(r.Statements)))
	for _, s := range r.Statements {
		e.String(s.Name)
		e.Uvarint(uint64(len(s.Params)))
		for _, p := range s.Params {
			p.appendTo(e)
		}
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *SQLRequest) UnmarshalBinary(b []byte) error { return r.decodeFrom(NewDecoder(b)) }

// decodeFrom decodes the message from d (Request).
func (r *SQLRequest) decodeFrom(d *Decoder) error {
	if err := expectTag(d, tagSQLRequest, "sql request"); err != nil {
		return err
	}
	out := SQLRequest{Op: SQLOp(d.Byte())}
	// A statement is at least its name's length and a params count; a
	// value at least its kind byte.
	if stmts := decodeList(d, 2, decodeSQLStatement); len(stmts) > 0 {
		out.Statements = stmts
	}
	if err := d.Finish("sql request"); err != nil {
		return err
	}
	if out.Op > SQLRollback {
		return errtext.Wrap(ErrDecode, "sql request: "+ErrDecode.Error()+": op "+errtext.U(out.Op))
	}
	*r = out
	return nil
}

// SQLResult is the outcome of one statement.
type SQLResult struct {
	// Columns names the result columns (empty for a statement returning
	// no rows).
	Columns []string
	// Rows are the result rows, each parallel to Columns.
	Rows [][]SQLValue
	// RowsAffected is the command tag's count (rows updated, deleted,
	// inserted or selected).
	RowsAffected int64
}

// SQLResponse is the response of sql_query: one result per statement.
type SQLResponse struct{ Results []SQLResult }

// MarshalBinary encodes the response.
func (r *SQLResponse) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 64))
	e.Byte(tagSQLResponse)
	e.Uvarint(uint64(len(r.Results)))
	for _, res := range r.Results {
		e.Strings(res.Columns)
		e.Varint(res.RowsAffected)
		e.Uvarint(uint64(len(res.Rows)))
		for _, row := range res.Rows {
			e.Uvarint(uint64(len(row)))
			for _, v := range row {
				v.appendTo(e)
			}
		}
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a response.
func (r *SQLResponse) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagSQLResponse, "sql response"); err != nil {
		return err
	}
	var out SQLResponse
	// A result is at least 3 bytes (columns count, rows affected, rows
	// count), a row at least its count, a value at least its kind byte.
	if results := decodeList(d, 3, decodeSQLResult); len(results) > 0 {
		out.Results = results
	}
	if err := d.Finish("sql response"); err != nil {
		return err
	}
	*r = out
	return nil
}
