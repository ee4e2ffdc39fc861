package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// Creates on one partition and lane within the window notify once at
// commit; the quiet ones that follow leave one trailing NOTIFY, sent the
// window after the first and after they committed, so an idle worker
// still hears of them. Without the trailing NOTIFY the second never comes;
// without the pacing both come at once.
func TestEligibleNotifyPacedCreates(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	const window = 400 * time.Millisecond
	c.SetEligibleNotifyWindowForTest(window)
	lane := "paced-lane"
	conn, err := pgx.ConnectConfig(ctx, c.Pool().Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+postgres.EligibleChannel); err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(int(parts.SoloPartition(lane).Index)) + ":" + lane
	start := time.Now()
	first := newExec(t, c, &execOpts{lane: lane})
	second := newExec(t, c, &execOpts{lane: lane}) // quiet: within the window
	third := newExec(t, c, &execOpts{lane: lane})  // quiet too; one trailer for both
	if time.Since(start) >= window/2 {
		t.Skipf("creates took %s, the window is %s: the machine is too slow for this check", time.Since(start), window)
	}
	var at []time.Duration
	for len(at) < 2 {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("notifications after %v: %v", at, err)
		}
		if n.Payload != want {
			t.Fatalf("payload %q, want %q", n.Payload, want)
		}
		at = append(at, time.Since(start))
	}
	if at[1] < window*3/4 {
		t.Fatalf("second NOTIFY %s after the first create, want the window (%s) after it: creates are not paced", at[1], window)
	}
	// Every execution was committed and eligible when the trailer came.
	for _, id := range []model.ExecutionID{first, second, third} {
		var st string
		err := c.Pool().QueryRow(ctx, `SELECT eligibility_state FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
			int16(id.Partition().Index), id.UUIDString()).Scan(&st)
		if err != nil || st != "eligible_now" {
			t.Fatalf("%s: %q %v", id, st, err)
		}
	}
	// Nothing more: one trailing NOTIFY for both quiet creates.
	wctx, cancel := context.WithTimeout(ctx, window*2)
	defer cancel()
	if n, err := conn.WaitForNotification(wctx); err == nil {
		t.Fatalf("a third NOTIFY %q: two quiet creates sent a trailer each", n.Payload)
	}
}
