package hostfn

import (
	"errors"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
)

// TestCheckPartitionWholeBatch: a statement's partition_key must be the
// selected partition's; with the whole batch selected, any of the batch's
// partitions, and still none outside it.
func TestCheckPartitionWholeBatch(t *testing.T) {
	req := func(pk int64) *sqlRequest {
		return &sqlRequest{
			req:   abi.SQLRequest{Op: abi.SQLExec, Statements: []abi.SQLStatement{{Name: pgsql.DependencyScan.Name, Params: []abi.SQLValue{abi.Int64(pk), abi.Int64(0), abi.Int64(1)}}}},
			stmts: []pgsql.Statement{pgsql.DependencyScan},
		}
	}
	c := &Caller{Caps: &abi.Capabilities{}, Tag: "{fp:0}", Batch: map[uint16]string{0: "{fp:0}", 2: "{fp:2}"}}
	refused := func(pk int64) bool {
		err := checkPartition(c, req(pk))
		var ae *abi.Error
		if err != nil && (!errors.As(err, &ae) || ae.Code != abi.CodeCrossPartition) {
			t.Fatalf("partition_key %d: %v, want a cross_partition error", pk, err)
		}
		return err != nil
	}
	if refused(0) || !refused(2) || !refused(1) {
		t.Fatal("one partition selected: want only its own partition_key accepted")
	}
	c.WholeBatch = true
	if refused(0) || refused(2) || !refused(1) || !refused(-1) {
		t.Fatal("whole batch selected: want the batch's partition_keys accepted, others refused")
	}
}
