package valkey_test

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	vk "github.com/valkey-io/valkey-go"
)

// TestLargerThanConnBuffers: commands, replies and pipelines many times
// the connections' 64 KiB buffers go through whole (a value of 1 MiB
// written and read back, a pipeline of 2,000 commands, a reply of 2,000
// items, ~200 KiB).
func TestLargerThanConnBuffers(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 30*time.Second)
	raw := c.Raw()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if err := raw.Do(ctx, raw.B().Set().Key("big").Value(string(big)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	got, err := raw.Do(ctx, raw.B().Get().Key("big").Build()).AsBytes()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GET of a 1 MiB value: %d bytes, %v", len(got), err)
	}
	cmds := make(vk.Commands, 0, 2000)
	for i := range 2000 {
		cmds = append(cmds, raw.B().Rpush().Key("list").Element(strconv.Itoa(i)+string(big[:100])).Build())
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		if n, err := r.AsInt64(); err != nil || n != int64(i+1) {
			t.Fatalf("pipelined RPUSH %d: %d, %v", i, n, err)
		}
	}
	items, err := raw.Do(ctx, raw.B().Lrange().Key("list").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil || len(items) != 2000 || items[1999] != "1999"+string(big[:100]) {
		t.Fatalf("LRANGE of 2000 items (~200 KiB): %d items, %v", len(items), err)
	}
}
