package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// TestFlowExample runs the DAG against a real server: the any-of step and
// the quorum step both complete.
func TestFlowExample(t *testing.T) {
	var out bytes.Buffer
	ctx := valkeytest.Context(t, time.Minute)
	c, err := sdk.Open(ctx, valkeytest.NewServer(t).URL(), sdk.ClientConfig{Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := run(ctx, c, valkeytest.Logger(), &out); err != nil {
		t.Fatal(err)
	}
	if want := "unpack: completed\nreport: completed\n"; out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
