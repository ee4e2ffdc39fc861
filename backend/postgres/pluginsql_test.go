package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/internal/hostseam"
)

// TestPluginSQL: the sql_query side of the driver binds the ABI's scalar
// kinds, returns cells as them, reports a server error's SQLSTATE and
// message as a *hostseam.SQLError, a statement over its row cap as
// ErrRowLimit, and InPluginTx commits on nil and rolls back on an error.
func TestPluginSQL(t *testing.T) {
	t.Parallel()
	db := postgres.PluginSQL{Pool: pgtest.Pool(t)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	err := db.InPluginTx(ctx, func(tx hostseam.PluginTx) error {
		res, err := tx.Query(ctx, `SELECT $1::int8 + 1 AS n, $2::text AS s, $3::bool AS b, $4::float8 AS f, NULL::text AS z`,
			[]abi.SQLValue{abi.Int64(41), abi.Text("x"), abi.Bool(true), {Kind: abi.SQLFloat, F: 1.5}}, 10)
		if err != nil {
			return err
		}
		want := []abi.SQLValue{abi.Int64(42), abi.Text("x"), abi.Bool(true), {Kind: abi.SQLFloat, F: 1.5}, abi.Null()}
		if len(res.Columns) != 5 || res.Columns[0] != "n" || len(res.Rows) != 1 || len(res.Rows[0]) != len(want) {
			t.Fatalf("result %+v", res)
		}
		for i, v := range res.Rows[0] {
			if v.String() != want[i].String() || v.Kind != want[i].Kind {
				t.Errorf("cell %d = %s, want %s", i, v.String(), want[i].String())
			}
		}
		if _, err := tx.Query(ctx, `SELECT generate_series(1, 3)`, nil, 2); !errors.Is(err, hostseam.ErrRowLimit) {
			t.Errorf("3 rows under a cap of 2: %v, want ErrRowLimit", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	tx, err := db.BeginPluginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Query(ctx, `SELECT 1/0`, nil, 10)
	var se *hostseam.SQLError
	if !errors.As(err, &se) || se.Code != "22012" || se.Message != "division by zero" {
		t.Fatalf("1/0: %v (%+v), want SQLSTATE 22012 division by zero", err, se)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	fail := errors.New("plugin error")
	err = db.InPluginTx(ctx, func(tx hostseam.PluginTx) error {
		if _, err := tx.Query(ctx, `CREATE TABLE plugin_sql_probe (n int)`, nil, 10); err != nil {
			return err
		}
		return fail
	})
	if !errors.Is(err, fail) {
		t.Fatalf("InPluginTx: %v, want fn's error", err)
	}
	err = db.InPluginTx(ctx, func(tx hostseam.PluginTx) error {
		_, err := tx.Query(ctx, `SELECT count(*) FROM plugin_sql_probe`, nil, 10)
		return err
	})
	if !errors.As(err, &se) || se.Code != "42P01" {
		t.Fatalf("the table of a rolled-back transaction: %v, want SQLSTATE 42P01", err)
	}
}

// TestPluginSQLQueryAlone: QueryAlone runs one statement as its own
// transaction (a write is committed when it returns), with Query's
// binding, row cap and errors.
func TestPluginSQLQueryAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	db := postgres.PluginSQL{Pool: pool}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := db.QueryAlone(ctx, `SELECT $1::int8 + 1`, []abi.SQLValue{abi.Int64(41)}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || res.Rows[0][0].AsInt() != 42 {
		t.Fatalf("result %+v", res)
	}
	if _, err := db.QueryAlone(ctx, `CREATE TABLE alone_t (n int)`, nil, 10); err != nil {
		t.Fatal(err)
	}
	if res, err := db.QueryAlone(ctx, `INSERT INTO alone_t VALUES (1), (2)`, nil, 10); err != nil || res.RowsAffected != 2 {
		t.Fatalf("insert: %+v, %v", res, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM alone_t`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("committed rows %d, %v; want 2", n, err)
	}
	if _, err := db.QueryAlone(ctx, `SELECT generate_series(1, 3)`, nil, 2); !errors.Is(err, hostseam.ErrRowLimit) {
		t.Fatalf("over the row cap: %v, want ErrRowLimit", err)
	}
	var se *hostseam.SQLError
	if _, err := db.QueryAlone(ctx, `SELECT 1/0`, nil, 10); !errors.As(err, &se) || se.Code != "22012" {
		t.Fatalf("division by zero: %v, want SQLSTATE 22012", err)
	}
}
