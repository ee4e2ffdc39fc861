package valkey_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// ServerTimeMicros is TIME to the microsecond: it falls between two
// millisecond readings (ServerTime) taken around it.
func TestServerTimeMicros(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	before, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	us, err := c.ServerTimeMicros(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if us/1000 < before || us/1000 > after {
		t.Fatalf("ServerTimeMicros %d µs is outside the ServerTime readings around it, %d..%d ms", us, before, after)
	}
}
