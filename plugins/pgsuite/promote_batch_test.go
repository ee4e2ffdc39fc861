package pgsuite_test

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
)

// TestPromoteBatchWritesWhatPerRowWrites: pgsql.PromoteProbe names the
// partitions with something to promote, and pgsql.PromoteBatch, the
// statement pg_delayed_promoter's batch calls then run over them at once,
// changes a due delayed execution and a submitted one exactly as
// the per-row statements (PromoteDelayed, PromoteSubmitted) change their
// twins — every column and every raw_fields key — promotes what is due
// and only that, and returns one row per promotion naming its partition.
func TestPromoteBatchWritesWhatPerRowWrites(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, time.Minute)
	pool := c.Pool()
	now := time.Now().UnixMilli()
	const twins = 6
	var perRow, batch []model.ExecutionID
	for range twins {
		perRow = append(perRow, create(t, c, "pb", "", now-1000))
		batch = append(batch, create(t, c, "pb", "", now-1000))
	}
	notDue := create(t, c, "pb", "", now+3600_000)
	subPerRow, subBatch := create(t, c, "pbs", "", 0), create(t, c, "pbs", "", 0)
	for _, id := range []model.ExecutionID{subPerRow, subBatch} {
		if _, err := pool.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'submitted' WHERE execution_id = $1::uuid`, id.UUIDString()); err != nil {
			t.Fatal(err)
		}
	}
	// Upstream's create leaves a delayed execution blocked for its delay:
	// both paths clear it.
	if _, err := pool.Exec(ctx, `UPDATE ff_exec_core SET blocking_reason = 'waiting_for_delay' WHERE lane_id = 'pb'`); err != nil {
		t.Fatal(err)
	}
	now = time.Now().UnixMilli() // the promotions' now: after every create
	all := append(append([]model.ExecutionID{notDue, subPerRow, subBatch}, perRow...), batch...)
	before := map[model.ExecutionID]map[string]any{}
	for _, id := range all {
		before[id] = rowOf(t, c, id)
	}

	for _, id := range perRow {
		if _, err := pool.Exec(ctx, pgsql.PromoteDelayed.SQL, int64(id.Partition().Index), id.UUIDString(), now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, pgsql.PromoteSubmitted.SQL, int64(subPerRow.Partition().Index), subPerRow.UUIDString(), now); err != nil {
		t.Fatal(err)
	}
	// The batch names every partition of the batch twins and the not-due
	// execution, padded as pdk.PartitionBatch pads.
	var keys []any
	seen := map[uint16]bool{}
	for _, id := range append([]model.ExecutionID{notDue, subBatch}, batch...) {
		if p := id.Partition().Index; !seen[p] {
			seen[p] = true
			keys = append(keys, int64(p))
		}
	}
	for len(keys) < pgsql.ProbePartitions {
		keys = append(keys, keys[len(keys)-1])
	}
	// PromoteProbe names the partitions with something to promote: the
	// batch twins' and the submitted twin's, not the not-due execution's
	// (unless it shares one).
	want := map[int64]bool{}
	for _, id := range append([]model.ExecutionID{subBatch}, batch...) {
		want[int64(id.Partition().Index)] = true
	}
	probed := map[int64]bool{}
	prows, err := pool.Query(ctx, pgsql.PromoteProbe.SQL, append(keys, now)...)
	if err != nil {
		t.Fatal(err)
	}
	for prows.Next() {
		var part int64
		if err := prows.Scan(&part); err != nil {
			t.Fatal(err)
		}
		probed[part] = true
	}
	if err := prows.Err(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(probed, want) {
		t.Fatalf("PromoteProbe named %v, want %v", probed, want)
	}
	rows, err := pool.Query(ctx, pgsql.PromoteBatch.SQL, append(keys, now, int64(1000))...)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var part int64
		var kind string
		if err := rows.Scan(&part, &kind); err != nil {
			t.Fatal(err)
		}
		got[kind]++
		if !seen[uint16(part)] {
			t.Errorf("promoted on partition %d, not in the batch", part)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"delayed": twins, "submitted": 1}; !maps.Equal(got, want) {
		t.Fatalf("PromoteBatch returned %v, want %v", got, want)
	}

	for i := range twins {
		a, b := changes(before[perRow[i]], rowOf(t, c, perRow[i])), changes(before[batch[i]], rowOf(t, c, batch[i]))
		if len(a) == 0 || !reflect.DeepEqual(a, b) {
			t.Errorf("delayed: per-row statement changed %v, batch %v", a, b)
		}
	}
	a, b := changes(before[subPerRow], rowOf(t, c, subPerRow)), changes(before[subBatch], rowOf(t, c, subBatch))
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Errorf("submitted: per-row statement changed %v, batch %v", a, b)
	}
	if ch := changes(before[notDue], rowOf(t, c, notDue)); len(ch) != 0 {
		t.Errorf("not-due execution changed: %v", ch)
	}
}

// rowOf is id's ff_exec_core row as JSON, raw_fields decoded.
func rowOf(t *testing.T, c *postgres.Client, id model.ExecutionID) map[string]any {
	t.Helper()
	var raw []byte
	if err := c.Pool().QueryRow(context.Background(), `SELECT to_jsonb(x)::text FROM ff_exec_core x WHERE partition_key = $1 AND execution_id = $2::uuid`,
		int16(id.Partition().Index), id.UUIDString()).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// changes is what went from before to after: each changed column with
// its new value, raw_fields key by key ("raw_fields.<key>").
func changes(before, after map[string]any) map[string]any {
	out := map[string]any{}
	flat := func(m map[string]any) map[string]any {
		f := map[string]any{}
		for k, v := range m {
			if k != "raw_fields" {
				f[k] = v
				continue
			}
			if raw, ok := v.(map[string]any); ok {
				for rk, rv := range raw {
					f["raw_fields."+rk] = rv
				}
			}
		}
		return f
	}
	b, a := flat(before), flat(after)
	for k, v := range a {
		if old, ok := b[k]; !ok || !reflect.DeepEqual(old, v) {
			out[k] = v
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out[k] = "(removed)"
		}
	}
	return out
}
