package valkey_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	vk "github.com/valkey-io/valkey-go"
)

// After a server restart every idle pooled connection is dead without
// knowing it; the first write on each must be sent again on a fresh
// connection instead of failing with "broken pipe".
func TestWritesSurviveServerRestart(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 30*time.Second)
	raw := c.Raw()
	// Open several connections: concurrent pipelines and a large one
	// (valkey-go sends those on pooled connections).
	warm := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			big := make(vk.Commands, 0, 600)
			for j := 0; j < 600; j++ {
				big = append(big, raw.B().Set().Key("k").Value("v").Build())
			}
			var err error
			for _, r := range raw.DoMulti(ctx, big...) {
				if e := r.Error(); e != nil {
					err = e
				}
			}
			warm <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-warm; err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 64; i++ {
		if err := raw.Do(ctx, raw.B().Incr().Key("n").Build()).Error(); err != nil {
			t.Fatalf("write %d after restart: %v", i, err)
		}
		big := make(vk.Commands, 0, 600)
		for j := 0; j < 600; j++ {
			big = append(big, raw.B().Incr().Key("m").Build())
		}
		for _, r := range raw.DoMulti(ctx, big...) {
			if err := r.Error(); err != nil {
				t.Fatalf("pipeline %d after restart: %v", i, err)
			}
		}
	}
	// Nothing ran twice.
	if n, err := raw.Do(ctx, raw.B().Get().Key("n").Build()).AsInt64(); err != nil || n != 64 {
		t.Fatalf("n = %d, %v; want 64", n, err)
	}
	if n, err := raw.Do(ctx, raw.B().Get().Key("m").Build()).AsInt64(); err != nil || n != 64*600 {
		t.Fatalf("m = %d, %v; want %d", n, err, 64*600)
	}
}
