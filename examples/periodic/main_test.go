package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// TestPeriodicExample: the embedded host's periodic plugin fires the
// schedule; three distinct tick executions run, then the schedule is
// removed. Needs bin/plugins/periodic.wasm (make test builds it first).
func TestPeriodicExample(t *testing.T) {
	srv := valkeytest.NewServer(t)
	vc := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 2*time.Minute)
	if _, err := vc.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, vc, filepath.Join("..", "..", "bin", "plugins"), &out); err != nil {
		t.Fatal(err)
	}
	if want := "heartbeat 1\nheartbeat 2\nheartbeat 3\nschedules left: 0\n"; out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
