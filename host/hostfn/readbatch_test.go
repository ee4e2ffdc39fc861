package hostfn

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/fabric-host/fabric/abi"
)

// A SORT_RO in a read batch is authorized for its key and for every key
// its GET patterns form: a pattern outside the read grant is refused, and
// one off the key's hash tag is a bad request (Valkey Cluster refuses
// such patterns; the host says so before sending).
func TestReadBatchSortPatterns(t *testing.T) {
	t.Parallel()
	h := readHandler(Config{})
	read, _ := abi.LookupHostFunc(abi.FnReadBatch)
	decode := func(ops ...abi.ReadOp) (subjects, error) {
		b, err := (&abi.BatchReadRequest{Ops: ops}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		_, s, err := h.decode(&request{b: b})
		return s, err
	}
	sortOp := func(key, pattern string) abi.ReadOp {
		return abi.ReadOp{Cmd: "SORT_RO", Key: key, Args: []string{"BY", "nosort", "GET", "#", "GET", pattern}}
	}
	out, edge := "ff:flow:{fp:1}:f:out:x", "ff:flow:{fp:1}:f:edge:*->downstream_execution_id"
	s, err := decode(sortOp(out, edge))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{out, "ff:flow:{fp:1}:f:edge:*"}; !slices.Equal(s.reads, want) || !slices.Equal(s.keys, want) {
		t.Fatalf("reads %v keys %v, want %v", s.reads, s.keys, want)
	}
	caps := abi.Capabilities{Read: []string{"ff:flow:*:out:*", "ff:flow:*:edge:*"}}
	c := &Caller{Plugin: "p", Caps: &caps, Tag: "{fp:1}", Stats: &Stats{}, Logger: slog.New(slog.DiscardHandler)}
	if err := authorize(c, read, s); err != nil {
		t.Fatalf("granted pattern refused: %v", err)
	}
	caps.Read = []string{"ff:flow:*:out:*"}
	if err := authorize(c, read, s); err == nil {
		t.Fatal("a pattern outside the read grant was allowed")
	}
	if _, err := decode(sortOp(out, "ff:flow:{fp:2}:f:edge:*->downstream_execution_id")); err == nil {
		t.Fatal("a pattern on another hash tag was accepted")
	}
	if _, err := decode(sortOp(out, "ff:flow:f:edge:*")); err == nil {
		t.Fatal("a pattern without a hash tag was accepted")
	}
}
