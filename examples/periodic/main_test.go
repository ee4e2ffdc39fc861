package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// TestPeriodicExample: the embedded host's periodic plugin fires the
// schedule; three distinct tick executions run, then the schedule is
// removed. Needs bin/plugins/periodic.wasm (make test builds it first).
func TestPeriodicExample(t *testing.T) {
	srv := valkeytest.NewServer(t)
	ctx := valkeytest.Context(t, 2*time.Minute)
	c, err := sdk.Open(ctx, srv.URL(), sdk.ClientConfig{Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vc := valkeytest.Dial(t, srv.URL(), 0)
	var out bytes.Buffer
	if err := run(ctx, c, vc, filepath.Join("..", "..", "bin", "plugins"), valkeytest.Logger(), &out); err != nil {
		t.Fatal(err)
	}
	if want := "heartbeat 1\nheartbeat 2\nheartbeat 3\nschedules left: 0\n"; out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
