package valkey_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestLowestScores: one pipelined read gives each sorted set's lowest
// score, Empty for a missing key, and the error of a key of another type.
func TestLowestScores(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().Zadd().Key("{fp:1}:ls:a").ScoreMember().ScoreMember(30, "x").ScoreMember(20, "y").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, raw.B().Set().Key("{fp:1}:ls:str").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	got := c.LowestScores(ctx, []string{"{fp:1}:ls:a", "{fp:1}:ls:none", "{fp:1}:ls:str"})
	if len(got) != 3 {
		t.Fatalf("got %d results, want 3", len(got))
	}
	if got[0].Err != nil || got[0].Empty || got[0].Score != 20 {
		t.Errorf("sorted set: %+v, want score 20", got[0])
	}
	if got[1].Err != nil || !got[1].Empty {
		t.Errorf("missing key: %+v, want Empty", got[1])
	}
	if got[2].Err == nil {
		t.Errorf("string key: %+v, want a WRONGTYPE error", got[2])
	}
	if c.LowestScores(ctx, nil) != nil {
		t.Error("no keys: want nil")
	}
}
