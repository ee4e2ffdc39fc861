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

// TestSuspensionExample: the job waits suspended until the external
// signal resumes it, then completes.
func TestSuspensionExample(t *testing.T) {
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
	if want := "waiting: suspended\nsignal resumed it: true\nexpense approved by dana\n"; out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
