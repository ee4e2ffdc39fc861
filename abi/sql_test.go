package abi_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/fabric-host/fabric/abi"
)

func TestSQLMessages(t *testing.T) {
	t.Parallel()
	t.Run("RequestRoundTrips", func(t *testing.T) {
		for _, req := range []abi.SQLRequest{
			{Op: abi.SQLBegin},
			{Op: abi.SQLCommit},
			{Op: abi.SQLExec, Statements: []abi.SQLStatement{
				{Name: "attempt_timeout.scan", Params: []abi.SQLValue{abi.Int64(7), abi.Int64(-1), abi.Text("x"), abi.Null(),
					abi.Bool(true), {Kind: abi.SQLFloat, F: 1.5}}},
				{Name: "promote.delayed"},
			}},
		} {
			b, _ := req.MarshalBinary()
			var got abi.SQLRequest
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, req) {
				t.Fatalf("got %+v, want %+v", got, req)
			}
		}
	})
	t.Run("ResponseRoundTrips", func(t *testing.T) {
		resp := abi.SQLResponse{Results: []abi.SQLResult{
			{Columns: []string{"execution_id", "n"}, Rows: [][]abi.SQLValue{{abi.Text("a"), abi.Int64(1)}, {abi.Null(), abi.Int64(2)}}, RowsAffected: 2},
			{RowsAffected: 1},
		}}
		b, _ := resp.MarshalBinary()
		var got abi.SQLResponse
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, resp) {
			t.Fatalf("got %+v, want %+v", got, resp)
		}
	})
	t.Run("GarbageIsADecodeError", func(t *testing.T) {
		for _, b := range [][]byte{nil, {0xC1}, {0xC1, 9, 0}, {0xC1, 0, 1, 1, 'a', 1, 9}, {0xC2, 200}} {
			var req abi.SQLRequest
			var resp abi.SQLResponse
			if err := req.UnmarshalBinary(b); !errors.Is(err, abi.ErrDecode) {
				t.Fatalf("request %x: %v", b, err)
			}
			if err := resp.UnmarshalBinary(b); !errors.Is(err, abi.ErrDecode) {
				t.Fatalf("response %x: %v", b, err)
			}
		}
	})
	t.Run("ValueAccessors", func(t *testing.T) {
		if abi.Text("42").AsInt() != 42 || abi.Int64(5).String() != "5" || !abi.Null().IsNull() || abi.Null().String() != "" {
			t.Fatal("accessors")
		}
	})
}
