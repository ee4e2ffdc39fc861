package abi_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

func TestCheckCompatible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, plugin string
		mismatch     bool
		invalid      bool
	}{
		{"1.0.0", "1.0.0", false, false},
		{"1.2.0", "1.1.9", false, false},
		{"1.2.0", "1.3.0", true, false},
		{"1.0.0", "2.0.0", true, false},
		{"2.0.0", "1.0.0", true, false},
		{"1.0.0", "1.0", false, true},
		{"1.0.0", "01.0.0", false, true},
		{"1.0.0", "1.0.0-rc1", false, false},
	}
	for _, tt := range tests {
		err := abi.CheckCompatible(tt.host, tt.plugin)
		if got := errors.Is(err, abi.ErrVersionMismatch); got != tt.mismatch {
			t.Errorf("CheckCompatible(%s, %s) = %v; mismatch %v, want %v", tt.host, tt.plugin, err, got, tt.mismatch)
		}
		if got := errors.Is(err, abi.ErrInvalidVersion); got != tt.invalid {
			t.Errorf("CheckCompatible(%s, %s) = %v; invalid %v, want %v", tt.host, tt.plugin, err, got, tt.invalid)
		}
	}
}

func validManifest() abi.Manifest {
	m := abi.Manifest{ABI: abi.Version, Name: "x_scanner", Version: "0.1.0",
		Config:       map[string]string{"lanes": "a,b"},
		Capabilities: abi.Capabilities{FCall: []string{"ff_promote_delayed"}, Read: []string{"ff:idx:*:lane:*:delayed"}, SQL: []string{"leases.expired"}}}
	m.ApplyDefaults()
	return m
}

func TestManifest(t *testing.T) {
	t.Parallel()

	t.Run("BinaryRoundTrip", func(t *testing.T) {
		t.Parallel()
		m := validManifest()
		b, _ := m.MarshalBinary()
		var got abi.Manifest
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, got) {
			t.Fatalf("round trip (-want, +got):\n%+v\n%+v", m, got)
		}
	})

	t.Run("ValidateRejects", func(t *testing.T) {
		t.Parallel()
		tests := map[string]func(*abi.Manifest){
			"name":          func(m *abi.Manifest) { m.Name = "Bad-Name" },
			"version":       func(m *abi.Manifest) { m.Version = "one" },
			"kind":          func(m *abi.Manifest) { m.Kind = "daemon" },
			"interval_ms":   func(m *abi.Manifest) { m.IntervalMs = 5 },
			"partition":     func(m *abi.Manifest) { m.Family = "moon" },
			"batch_size":    func(m *abi.Manifest) { m.BatchSize = abi.MaxBatchSize + 1 },
			"timeout_ms":    func(m *abi.Manifest) { m.TimeoutMs = abi.MaxTimeoutMs + 1 },
			"max_pages":     func(m *abi.Manifest) { m.MaxPages = abi.MaxMaxPages + 1 },
			"fcall":         func(m *abi.Manifest) { m.Capabilities.FCall = []string{"EVAL"} },
			"read":          func(m *abi.Manifest) { m.Capabilities.Read = []string{"*"} },
			"sql":           func(m *abi.Manifest) { m.Capabilities.SQL = []string{"DROP TABLE"} },
			"abi mismatch":  func(m *abi.Manifest) { m.ABI = "2.0.0" },
			"abi malformed": func(m *abi.Manifest) { m.ABI = "v1" },
		}
		for name, mutate := range tests {
			m := validManifest()
			mutate(&m)
			err := m.Validate()
			if !errors.Is(err, abi.ErrInvalidManifest) {
				t.Errorf("%s: Validate = %v, want ErrInvalidManifest", name, err)
			}
			if name == "abi mismatch" && !errors.Is(err, abi.ErrVersionMismatch) {
				t.Errorf("abi mismatch: %v does not match ErrVersionMismatch", err)
			}
		}
		m := validManifest()
		if err := m.Validate(); err != nil {
			t.Fatalf("valid manifest: %v", err)
		}
	})
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	c := abi.Capabilities{FCall: []string{"ff_promote_delayed"}, Read: []string{"ff:idx:*:lane:*:delayed", "ff:exec:*:core"}}
	tests := []struct {
		name string
		err  error
		want abi.Code
	}{
		{"granted fcall", c.AllowFCall("ff_promote_delayed"), abi.CodeOK},
		{"ungranted fcall", c.AllowFCall("ff_cancel_execution"), abi.CodeDenied},
		{"granted read", c.AllowRead("ff:idx:{fp:3}:lane:default:delayed"), abi.CodeOK},
		{"granted read of double-tagged key", c.AllowRead("ff:exec:{fp:3}:{fp:3}:0e0d8c0e-0000-4000-8000-000000000000:core"), abi.CodeOK},
		{"ungranted read", c.AllowRead("ff:idx:{fp:3}:all_executions"), abi.CodeDenied},
		{"ungranted sql", c.AllowSQL("leases.expired"), abi.CodeDenied},
		{"same partition", c.AllowKeyOnPartition("ff:idx:{fp:1}:lease_expiry", "{fp:1}"), abi.CodeOK},
		{"other partition", c.AllowKeyOnPartition("ff:idx:{fp:10}:lease_expiry", "{fp:1}"), abi.CodeCrossPartition},
		{"no tag", c.AllowKeyOnPartition("ff:idx:workers", "{fp:1}"), abi.CodeCrossPartition},
	}
	for _, tt := range tests {
		var got abi.Code
		var ae *abi.Error
		if errors.As(tt.err, &ae) {
			got = ae.Code
		}
		if got != tt.want {
			t.Errorf("%s: %v, want code %s", tt.name, tt.err, tt.want)
		}
		if tt.want != abi.CodeOK && !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: errors.Is(%v, %s) is false", tt.name, tt.err, tt.want)
		}
	}
	cross := abi.Capabilities{CrossPartition: true}
	if err := cross.AllowKeyOnPartition("ff:idx:{fp:10}:x", "{fp:1}"); err != nil {
		t.Fatalf("cross_partition grant refused: %v", err)
	}
}

type message interface {
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

func TestMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, out message
	}{
		{&abi.ScanRequest{Cycle: 9, Partition: model.Partition{Family: model.FamilyBudget, Index: 31}, Partitions: 32, BatchSize: 50, DeadlineMs: 5000}, &abi.ScanRequest{}},
		{&abi.ScanResult{Scanned: 3, Acted: 2, Skipped: 1, Errors: 4, NextDueMs: 1_700_000_000_123}, &abi.ScanResult{}},
		{&abi.FCallRequest{Calls: []abi.Call{{Function: "ff_x", Keys: []string{"k1", "k2"}, Args: []string{"a", ""}, Item: "id"}, {Function: "ff_y"}}}, &abi.FCallRequest{}},
		{&abi.FCallResponse{Results: []abi.CallResult{{Result: abi.StatusOK, Status: "OK", Fields: []string{"promoted"}}, {Result: abi.StatusSkipped}}}, &abi.FCallResponse{}},
		{&abi.HMGetRequest{Key: "k", Fields: []string{"a", "b"}}, &abi.HMGetRequest{}},
		{&abi.HMGetResponse{Values: []abi.Field{{Value: "1", Present: true}, {}}}, &abi.HMGetResponse{}},
		{&abi.ZRangeRequest{Key: "z", Min: "-inf", Max: "(17", Offset: 2, Count: 50, WithScores: true}, &abi.ZRangeRequest{}},
		{&abi.Members{Members: []string{"a", "b"}, Scores: []float64{1.5, -2}}, &abi.Members{}},
		{&abi.KeyRequest{Key: "s"}, &abi.KeyRequest{}},
		{&abi.ScanCursorRequest{Key: "s", Cursor: "0", Match: "x*", Count: 10}, &abi.ScanCursorRequest{}},
		{&abi.ScanCursorResponse{Cursor: "17", Members: []string{"m"}}, &abi.ScanCursorResponse{}},
		{&abi.Metric{Kind: abi.MetricGauge, Name: "depth", Value: 3.25}, &abi.Metric{}},
	}
	for _, tt := range tests {
		b, err := tt.in.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := tt.out.UnmarshalBinary(b); err != nil {
			t.Fatalf("%T: %v", tt.in, err)
		}
		if !reflect.DeepEqual(tt.in, tt.out) {
			t.Errorf("%T round trip (-want, +got):\n%+v\n%+v", tt.in, tt.in, tt.out)
		}
		// Every strict prefix and a trailing byte must fail, never panic.
		for i := 0; i < len(b); i++ {
			if err := tt.out.UnmarshalBinary(b[:i]); err == nil {
				t.Errorf("%T: prefix of %d/%d bytes decoded", tt.in, i, len(b))
			}
		}
		if err := tt.out.UnmarshalBinary(append(b, 0)); !errors.Is(err, abi.ErrDecode) {
			t.Errorf("%T: trailing byte: %v", tt.in, err)
		}
	}
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	body, err := abi.OpenEnvelope(abi.AppendEnvelope(nil, []byte("hi")))
	if err != nil || string(body) != "hi" {
		t.Fatalf("ok envelope = %q, %v", body, err)
	}
	_, err = abi.OpenEnvelope(abi.ErrorEnvelope(abi.Errorf(abi.CodeDenied, "fcall ff_x is not granted")))
	if !errors.Is(err, abi.CodeDenied) || !strings.Contains(err.Error(), "not granted") {
		t.Fatalf("error envelope = %v", err)
	}
	_, err = abi.OpenEnvelope(abi.ErrorEnvelope(errors.New("connection reset")))
	if !errors.Is(err, abi.CodeBackend) {
		t.Fatalf("plain error envelope = %v, want backend code", err)
	}
}

func TestHostFuncsTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, f := range abi.HostFuncs {
		if seen[f.Name] {
			t.Fatalf("host function %s listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Summary == "" {
			t.Errorf("%s has no summary", f.Name)
		}
	}
	if abi.Namespace != "fabric:host/v1" {
		t.Fatalf("Namespace %q must match pdk's //go:wasmimport directives and the ABI major", abi.Namespace)
	}
}

func FuzzScanResult(f *testing.F) {
	r := abi.ScanResult{Scanned: 1, Acted: 1}
	b, _ := r.MarshalBinary()
	f.Add(b)
	f.Add([]byte("\xde\xad\xbe\xef"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r abi.ScanResult
		_ = r.UnmarshalBinary(b)
		var c abi.FCallRequest
		_ = c.UnmarshalBinary(b)
		var br abi.ScanBatchRequest
		_ = br.UnmarshalBinary(b)
		var bres abi.ScanBatchResult
		_ = bres.UnmarshalBinary(b)
	})
}

func TestSizedPtr(t *testing.T) {
	for _, tc := range []struct {
		off    uint64
		length int
	}{{0, 1}, {8, 1}, {0xffff_fff0, 16}, {12345, 1 << 20}, {1, 0xffff_ffff}} {
		v := abi.SizedPtr(tc.off, tc.length)
		off, n, sized := abi.SplitPtr(v)
		if off != tc.off || int(n) != tc.length || !sized {
			t.Errorf("SplitPtr(SizedPtr(%d, %d)) = %d, %d, %v", tc.off, tc.length, off, n, sized)
		}
	}
	// An ABI 1.0/1.1 pointer (no length) stays unsized.
	if off, n, sized := abi.SplitPtr(4096); off != 4096 || n != 0 || sized {
		t.Errorf("SplitPtr(4096) = %d, %d, %v", off, n, sized)
	}
	// A length of zero cannot be told from no length: it is sent unsized.
	if _, _, sized := abi.SplitPtr(abi.SizedPtr(64, 0)); sized {
		t.Error("a zero length must read as unsized")
	}
}

func TestScanBatchMessages(t *testing.T) {
	req := abi.ScanBatchRequest{Cycle: 7, Family: model.FamilyFlow, Partitions: 256, Indexes: []uint16{0, 5, 255}, BatchSize: 50, DeadlineMs: 3000}
	b, err := req.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got abi.ScanBatchRequest
	if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	if r := got.Request(1); r.Partition.Index != 5 || r.Cycle != 7 || r.Partitions != 256 || r.BatchSize != 50 {
		t.Fatalf("Request(1) = %+v", r)
	}
	res := abi.ScanBatchResult{Results: []abi.ScanResult{{Scanned: 3, Acted: 2, NextDueMs: 99}, {}, {Errors: 1}}}
	rb, _ := res.MarshalBinary()
	var gotRes abi.ScanBatchResult
	if err := gotRes.UnmarshalBinary(rb); err != nil || !reflect.DeepEqual(gotRes, res) {
		t.Fatalf("result round trip = %+v, %v", gotRes, err)
	}
	for name, bad := range map[string][]byte{
		"empty":             nil,
		"wrong tag":         append([]byte{0xA1}, b[1:]...),
		"trailing byte":     append(append([]byte{}, b...), 0),
		"truncated":         b[:len(b)-2],
		"partition too big": mustBatch(t, abi.ScanBatchRequest{Partitions: 4, Indexes: []uint16{4}}),
	} {
		if err := got.UnmarshalBinary(bad); !errors.Is(err, abi.ErrDecode) {
			t.Errorf("%s: err = %v, want ErrDecode", name, err)
		}
	}
	if err := gotRes.UnmarshalBinary(append(append([]byte{}, rb...), 1)); !errors.Is(err, abi.ErrDecode) {
		t.Errorf("result with a trailing byte: %v", err)
	}
	if _, err := (&abi.ScanBatchRequest{Indexes: make([]uint16, abi.MaxBatchPartitions+1)}).MarshalBinary(); err == nil {
		t.Error("an oversized batch was encoded")
	}
}

func mustBatch(t *testing.T, r abi.ScanBatchRequest) []byte {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ReadOp.Patterns names the keys a SORT_RO's BY and GET patterns read, cut
// at "->", and nothing for GET #, BY without "*" or other commands.
func TestReadOpPatterns(t *testing.T) {
	op := abi.ReadOp{Cmd: "SORT_RO", Key: "s", Args: []string{"BY", "nosort", "LIMIT", "0", "10", "GET", "#", "ALPHA",
		"GET", "h:*->f", "BY", "w:*", "GET", "k:*", "DESC"}}
	if got, want := op.Patterns(), []string{"h:*", "w:*", "k:*"}; !slices.Equal(got, want) {
		t.Fatalf("patterns %q, want %q", got, want)
	}
	if got := (abi.ReadOp{Cmd: "SMEMBERS", Key: "s", Args: []string{"GET", "x:*"}}).Patterns(); got != nil {
		t.Fatalf("SMEMBERS patterns %q", got)
	}
}
