package exenv

import (
	"context"
	"testing"
	"time"
)

// TestPrivateServerIsInitialised: the server Connect starts for an
// example holds the partition config a host would write, so the SDK
// clients of the examples find it and print no warning about its absence.
func TestPrivateServerIsInitialised(t *testing.T) {
	t.Setenv("FABRIC_VALKEY_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vc, closeAll, err := Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	parts, found, err := vc.ReadPartitionConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("ff:config:partitions is absent on the private server")
	}
	if parts != vc.Partitions() {
		t.Fatalf("stored partitions %+v, client's %+v", parts, vc.Partitions())
	}
}
