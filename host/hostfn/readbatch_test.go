package hostfn

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/fabric-host/fabric/abi"
)

// readBatchAuth decodes a read batch of ops as the read_batch host
// function does and authorizes it for a caller granted read on
// partition tag; the error is the decode's or the authorization's.
func readBatchAuth(t *testing.T, read []string, tag string, crossPartition bool, ops ...abi.ReadOp) (subjects, error) {
	t.Helper()
	b, err := (&abi.BatchReadRequest{Ops: ops}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, s, err := readHandler(Config{}).decode(&request{b: b})
	if err != nil {
		return s, err
	}
	hf, _ := abi.LookupHostFunc(abi.FnReadBatch)
	caps := abi.Capabilities{Read: read, CrossPartition: crossPartition}
	c := &Caller{Plugin: "p", Caps: &caps, Tag: tag, Stats: &Stats{}, Logger: slog.New(slog.DiscardHandler)}
	return s, authorize(c, hf, s)
}

// A SORT_RO in a read batch is authorized for its key and for every key
// its GET patterns form: a pattern outside the read grant is refused, and
// one off the key's hash tag is a bad request (Valkey Cluster refuses
// such patterns; the host says so before sending).
func TestReadBatchSortPatterns(t *testing.T) {
	t.Parallel()
	sortOp := func(key string, args ...string) abi.ReadOp {
		return abi.ReadOp{Cmd: "SORT_RO", Key: key, Args: args}
	}
	out, edge := "ff:flow:{fp:1}:f:out:x", "ff:flow:{fp:1}:f:edge:*->downstream_execution_id"
	grant := []string{"ff:flow:*:out:*", "ff:flow:*:edge:*"}
	s, err := readBatchAuth(t, grant, "{fp:1}", false, sortOp(out, "BY", "nosort", "GET", "#", "GET", edge))
	if err != nil {
		t.Fatalf("granted pattern refused: %v", err)
	}
	if want := []keyPattern{{"ff:flow:{fp:1}:f:edge:", ""}}; !slices.Equal(s.reads, []string{out}) || !slices.Equal(s.patterns, want) {
		t.Fatalf("reads %v patterns %v, want [%s] %v", s.reads, s.patterns, out, want)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		grant []string
		want  error // nil: allowed
	}{
		{"GetOutsideGrant", []string{"GET", edge}, []string{"ff:flow:*:out:*"}, abi.CodeDenied},
		{"GetSecret", []string{"GET", "ff:secret:{fp:1}:*"}, grant, abi.CodeDenied},
		{"BySecret", []string{"BY", "ff:secret:{fp:1}:*", "GET", "#"}, grant, abi.CodeDenied},
		{"BySecretField", []string{"BY", "ff:secret:{fp:1}:*->weight"}, grant, abi.CodeDenied},
		{"ByInGrant", []string{"BY", "ff:flow:{fp:1}:f:edge:*->weight", "DESC", "LIMIT", "0", "10"}, grant, nil},
		{"ByNoSort", []string{"BY", "ff:secret:{fp:1}:nosort"}, grant, nil}, // no '*': no key read
		{"GetFixedKey", []string{"GET", "ff:secret:{fp:1}:x"}, grant, nil},  // no '*': Valkey answers nil
		{"GetHash", []string{"GET", "#", "ALPHA", "ASC"}, grant, nil},
		// Only the first '*' is replaced: the text before it must be in
		// the grant's family, "->" before it is part of the key.
		{"ArrowBeforeStar", []string{"GET", "ff:secret:{fp:1}->ff:flow:*:edge:*"}, grant, abi.CodeDenied},
		{"ArrowBeforeStarSuffix", []string{"GET", "ff:exec:{fp:1}:x:core->*:secret"}, []string{"ff:exec:*:core"}, abi.CodeDenied},
		// A '?' of the grant matches the text "*" but not every element.
		{"QuestionGrant", []string{"GET", "ff:flow:{fp:1}:f:edge:*"}, []string{"ff:flow:{fp:1}:f:edge:?"}, abi.CodeDenied},
		{"SecondStarLiteral", []string{"GET", "ff:flow:{fp:1}:f:edge:*:*"}, grant, nil},
		{"WrongTag", []string{"GET", "ff:flow:{fp:2}:f:edge:*"}, grant, abi.CodeBadRequest},
		{"NoTag", []string{"GET", "ff:flow:f:edge:*"}, grant, abi.CodeBadRequest},
		// The element could open the tag: "{fp:1" + "}" ...
		{"TagOpenAtStar", []string{"GET", "ff:flow:{fp:*}:edge:x"}, []string{"ff:*"}, abi.CodeBadRequest},
		{"TagAfterStar", []string{"GET", "ff:flow:*:{fp:1}:edge"}, []string{"ff:*"}, abi.CodeBadRequest},
		{"Store", []string{"STORE", "ff:flow:{fp:1}:f:out:y"}, grant, abi.CodeBadRequest},
		{"Unknown", []string{"GETX", "ff:secret:{fp:1}:*"}, grant, abi.CodeBadRequest},
		{"DanglingGet", []string{"GET"}, grant, abi.CodeBadRequest},
		// LIMIT consumes two arguments: what follows is an option again.
		{"LimitThenGet", []string{"LIMIT", "0", "1", "GET", "ff:secret:{fp:1}:*"}, grant, abi.CodeDenied},
	} {
		_, err := readBatchAuth(t, tc.grant, "{fp:1}", false, sortOp(out, tc.args...))
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want == abi.CodeDenied && !errors.Is(err, abi.CodeDenied):
			t.Errorf("%s: %v, want a refusal (denied)", tc.name, err)
		case tc.want == abi.CodeBadRequest && (err == nil || errors.Is(err, abi.CodeDenied)):
			t.Errorf("%s: %v, want a bad request", tc.name, err)
		}
	}
}

// EXISTS in a read batch reads every key it names: each is checked
// against the read grant and the partition, not only the first.
func TestReadBatchExistsEveryKey(t *testing.T) {
	t.Parallel()
	grant := []string{"ff:idx:*:lane:*:eligible"}
	eligible := "ff:idx:{fp:1}:lane:default:eligible"
	exists := func(keys ...string) abi.ReadOp { return abi.ReadOp{Cmd: "EXISTS", Key: keys[0], Args: keys[1:]} }
	if _, err := readBatchAuth(t, grant, "{fp:1}", false, exists(eligible, "ff:idx:{fp:1}:lane:other:eligible")); err != nil {
		t.Fatalf("granted keys refused: %v", err)
	}
	if _, err := readBatchAuth(t, grant, "{fp:1}", false, exists(eligible, "ff:secret:{fp:1}:x")); !errors.Is(err, abi.CodeDenied) {
		t.Fatalf("EXISTS of a granted key then a secret one: %v, want refused", err)
	}
	if _, err := readBatchAuth(t, grant, "{fp:1}", false, exists(eligible, "ff:idx:{fp:2}:lane:default:eligible")); !errors.Is(err, abi.CodeCrossPartition) {
		t.Fatalf("EXISTS of a key of another partition: %v, want refused", err)
	}
	// The other commands take no further key: extra arguments are refused
	// before anything is sent.
	if _, err := readBatchAuth(t, grant, "{fp:1}", false, abi.ReadOp{Cmd: "GET", Key: eligible, Args: []string{"ff:secret:{fp:1}:x"}}); err == nil {
		t.Fatal("GET with a second argument was accepted")
	}
}

// expandPattern splits patterns as Valkey's lookupKeyByPattern: first
// '*' only, "->field" only after it and only with a field.
func TestExpandPattern(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want keyPattern
		ok   bool
	}{
		{"#", keyPattern{}, false},
		{"w_nosort", keyPattern{}, false},
		{"a:*", keyPattern{"a:", ""}, true},
		{"a:*:b->f", keyPattern{"a:", ":b"}, true},
		{"a:*->", keyPattern{"a:", "->"}, true},
		{"a->b:*:c", keyPattern{"a->b:", ":c"}, true},
		{"a:*:*->f->g", keyPattern{"a:", ":*"}, true},
	} {
		got, ok := expandPattern(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("expandPattern(%q) = %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
