package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// TestSuspensionExample: the job waits suspended until the external
// signal resumes it, then completes.
func TestSuspensionExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(valkeytest.Context(t, time.Minute), valkeytest.Client(t), &out); err != nil {
		t.Fatal(err)
	}
	if want := "waiting: suspended\nsignal resumed it: true\nexpense approved by dana\n"; out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
