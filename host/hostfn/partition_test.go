package hostfn

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/fabric-host/fabric/abi"
)

// With the whole batch selected (abi.PartitionWholeBatch), a host call may
// touch keys of any of the batch's partitions and of no other; selecting
// one partition again narrows it back; outside a batch the selection is
// refused.
func TestPartitionWholeBatch(t *testing.T) {
	t.Parallel()
	caps := abi.Capabilities{Read: []string{"ff:idx:*"}, FCall: []string{"ff_noop"}}
	c := &Caller{Plugin: "p", Caps: &caps, Tag: "{fp:1}", Stats: &Stats{}, Logger: slog.New(slog.DiscardHandler),
		Batch: map[uint16]string{1: "{fp:1}", 2: "{fp:2}"}}
	ctx := WithCaller(context.Background(), c)
	sel := func(idx uint32) int32 {
		stack := []uint64{uint64(idx)}
		partitionFunction()(ctx, stack)
		return int32(uint32(stack[0]))
	}
	read, _ := abi.LookupHostFunc(abi.FnReadBatch)
	keys := func(ks ...string) subjects { return subjects{reads: ks, keys: ks} }
	allowed := func(ks ...string) bool { return authorize(c, read, keys(ks...)) == nil }

	if allowed("ff:idx:{fp:1}:a", "ff:idx:{fp:2}:a") {
		t.Fatal("one partition selected: a key of another partition of the batch was allowed")
	}
	if rc := sel(abi.PartitionWholeBatch); rc != 0 || !c.WholeBatch {
		t.Fatalf("select whole batch: rc %d, WholeBatch %v", rc, c.WholeBatch)
	}
	if !allowed("ff:idx:{fp:1}:a", "ff:idx:{fp:2}:a") {
		t.Fatal("whole batch: keys of the batch's partitions refused")
	}
	err := authorize(c, read, keys("ff:idx:{fp:1}:a", "ff:idx:{fp:3}:a"))
	if !errors.Is(err, abi.CodeCrossPartition) {
		t.Fatalf("whole batch: a key outside the batch: %v, want cross-partition", err)
	}
	if rc := sel(2); rc != 0 || c.WholeBatch || c.Tag != "{fp:2}" {
		t.Fatalf("select 2: rc %d, WholeBatch %v, Tag %q", rc, c.WholeBatch, c.Tag)
	}
	if allowed("ff:idx:{fp:1}:a") {
		t.Fatal("partition 2 selected: partition 1's key allowed")
	}

	// The FCALL stage hook hears of each partition a whole-batch FCALL is for.
	var told []string
	c.OnFCall = func(tag string) func() { told = append(told, tag); return nil }
	c.WholeBatch = true
	c.fcallSent([]abi.Call{{Keys: []string{"ff:exec:{fp:2}:x"}}, {Keys: []string{"ff:exec:{fp:1}:y"}}, {Keys: []string{"ff:exec:{fp:2}:z"}}})
	if len(told) != 2 || told[0] != "{fp:2}" || told[1] != "{fp:1}" {
		t.Fatalf("OnFCall told %q, want {fp:2} {fp:1}", told)
	}

	outside := &Caller{Plugin: "p", Caps: &caps, Stats: &Stats{}, Logger: slog.New(slog.DiscardHandler)}
	stack := []uint64{abi.PartitionWholeBatch}
	partitionFunction()(WithCaller(context.Background(), outside), stack)
	if int32(uint32(stack[0])) >= 0 || outside.WholeBatch {
		t.Fatalf("outside a batch: rc %d, WholeBatch %v", int32(uint32(stack[0])), outside.WholeBatch)
	}
}
