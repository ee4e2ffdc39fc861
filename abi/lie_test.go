package abi

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// lieBytes is the size of the lying lists: 16 MiB, what took a host from
// 205 MB to 1.09 GB of RSS through read_batch.
const lieBytes = 16 << 20

// lieAllocBound is what decoding a lie may allocate: far below the count,
// whatever it claims.
const lieAllocBound = 1 << 20

// lyingDecoders are the decoders of every message with a list, each with
// the bytes before the list's count (its tag and the fields ahead of it,
// or the enclosing elements of a nested list).
var lyingDecoders = []struct {
	name   string
	prefix []byte
	decode func([]byte) error
}{
	{"BatchReadRequest", []byte{tagBatchReadReq}, func(b []byte) error { return new(BatchReadRequest).UnmarshalBinary(b) }},
	{"BatchReadRequest.Args", []byte{tagBatchReadReq, 1, 0, 0}, func(b []byte) error { return new(BatchReadRequest).UnmarshalBinary(b) }},
	{"BatchReadResponse", []byte{tagBatchReadResp}, func(b []byte) error { return new(BatchReadResponse).UnmarshalBinary(b) }},
	{"BatchReadResponse.Values", []byte{tagBatchReadResp, 1, 0}, func(b []byte) error { return new(BatchReadResponse).UnmarshalBinary(b) }},
	{"FCallRequest", []byte{tagFCallRequest}, func(b []byte) error { return new(FCallRequest).UnmarshalBinary(b) }},
	{"FCallRequest.Keys", []byte{tagFCallRequest, 1, 0}, func(b []byte) error { return new(FCallRequest).UnmarshalBinary(b) }},
	{"FCallResponse", []byte{tagFCallResp}, func(b []byte) error { return new(FCallResponse).UnmarshalBinary(b) }},
	{"HMGetRequest", []byte{tagHMGetRequest, 0}, func(b []byte) error { return new(HMGetRequest).UnmarshalBinary(b) }},
	{"HMGetResponse", []byte{tagHMGetResp}, func(b []byte) error { return new(HMGetResponse).UnmarshalBinary(b) }},
	{"Members", []byte{tagMembers}, func(b []byte) error { return new(Members).UnmarshalBinary(b) }},
	{"Members.Scores", []byte{tagMembers, 0}, func(b []byte) error { return new(Members).UnmarshalBinary(b) }},
	{"ScanCursorResponse", []byte{tagCursorResp, 0}, func(b []byte) error { return new(ScanCursorResponse).UnmarshalBinary(b) }},
	{"CommandRequest", []byte{tagReadReq, 0, 0}, func(b []byte) error { return new(CommandRequest).UnmarshalBinary(b) }},
	{"DispatchRequest", []byte{tagDispatchReq, 0}, func(b []byte) error { return new(DispatchRequest).UnmarshalBinary(b) }},
	{"SQLRequest", []byte{tagSQLRequest, byte(SQLExec)}, func(b []byte) error { return new(SQLRequest).UnmarshalBinary(b) }},
	{"SQLRequest.Params", []byte{tagSQLRequest, byte(SQLExec), 1, 0}, func(b []byte) error { return new(SQLRequest).UnmarshalBinary(b) }},
	{"SQLResponse", []byte{tagSQLResponse}, func(b []byte) error { return new(SQLResponse).UnmarshalBinary(b) }},
	{"SQLResponse.Rows", []byte{tagSQLResponse, 1, 0, 0}, func(b []byte) error { return new(SQLResponse).UnmarshalBinary(b) }},
	{"SQLResponse.Row", []byte{tagSQLResponse, 1, 0, 0, 1}, func(b []byte) error { return new(SQLResponse).UnmarshalBinary(b) }},
	// Manifest: ABI, name, version, kind, interval, family, batch size,
	// timeout, max pages, then the config's count.
	{"Manifest.Config", []byte{manifestTag, 0, 0, 0, 0, 0, 0, 0, 0, 0}, func(b []byte) error { return new(Manifest).UnmarshalBinary(b) }},
	{"ScanBatchRequest", []byte{tagScanBatchRequest, 0, 0, 0}, func(b []byte) error { return new(ScanBatchRequest).UnmarshalBinary(b) }},
	{"ScanBatchResult", []byte{tagScanBatchResult}, func(b []byte) error { return new(ScanBatchResult).UnmarshalBinary(b) }},
}

// lie returns prefix, then a count equal to the bytes that follow it,
// then that many bytes of fill.
func lie(prefix []byte, fill byte) []byte {
	b := binary.AppendUvarint(append([]byte(nil), prefix...), lieBytes)
	for range lieBytes {
		b = append(b, fill)
	}
	return b
}

// allocated returns the bytes f allocates on the Go heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodersRefuseLyingCounts: every decoder given a list count equal
// to the bytes left (16 MiB of 0xff, which holds no element) or a huge
// varint count fails, allocating under 1 MiB. So does one given 16 MiB
// of zeros where its elements take more than one byte. On main a
// read_batch request's lie allocated 56 bytes per op claimed (896 MiB
// here) before the decoder noticed.
func TestDecodersRefuseLyingCounts(t *testing.T) {
	for _, tt := range lyingDecoders {
		inputs := map[string][]byte{
			"count=bytes left, 0xff": lie(tt.prefix, 0xff),
			"count=2^62":             binary.AppendUvarint(append([]byte(nil), tt.prefix...), 1<<62),
		}
		if !zeroIsElement(tt.name) {
			inputs["count=bytes left, 0x00"] = lie(tt.prefix, 0)
		}
		for what, in := range inputs {
			var err error
			n := allocated(func() { err = tt.decode(in) })
			if !errors.Is(err, ErrDecode) {
				t.Errorf("%s, %s: err %v, want ErrDecode", tt.name, what, err)
			}
			if n > lieAllocBound {
				t.Errorf("%s, %s: allocated %d bytes decoding a lie (bound %d): %v", tt.name, what, n, lieAllocBound, err)
			}
		}
	}
}

// zeroIsElement reports whether a zero byte is a whole element of the
// list under test (an empty string, an SQL null, an empty row): lieBytes
// zeros are then a true count of elements present.
func zeroIsElement(name string) bool {
	switch name {
	case "BatchReadRequest.Args", "FCallRequest.Keys", "HMGetRequest", "Members", "ScanCursorResponse",
		"CommandRequest", "SQLRequest.Params", "SQLResponse.Rows", "SQLResponse.Row":
		return true
	}
	return false
}

// TestDecodeWithinBoundsHonestLists: a well-formed request whose 16 MiB
// hold 16 Mi one-byte elements (empty strings, SQL nulls: 16 to 40 bytes
// each decoded) fails under DecodeWithin's limit with ErrDecodeLimit,
// allocating about the limit, not the 0.25 to 4.5 GB its decoded form
// would take; under a limit it fits, it decodes.
func TestDecodeWithinBoundsHonestLists(t *testing.T) {
	const limit = 512 << 10
	for _, tt := range []struct {
		name   string
		prefix []byte
		req    func() Request
	}{
		{"BatchReadRequest.Args", []byte{tagBatchReadReq, 1, 0, 0}, func() Request { return new(BatchReadRequest) }},
		{"HMGetRequest", []byte{tagHMGetRequest, 0}, func() Request { return new(HMGetRequest) }},
		{"CommandRequest", []byte{tagReadReq, 0, 0}, func() Request { return new(CommandRequest) }},
		{"SQLRequest.Params", []byte{tagSQLRequest, byte(SQLExec), 1, 0}, func() Request { return new(SQLRequest) }},
	} {
		in := lie(tt.prefix, 0)
		var err error
		var used int
		n := allocated(func() { used, err = DecodeWithin(tt.req(), in, limit) })
		if !errors.Is(err, ErrDecodeLimit) {
			t.Errorf("%s: err %v, want ErrDecodeLimit", tt.name, err)
		}
		if n > 2*limit || used > 2*limit {
			t.Errorf("%s: allocated %d bytes, charged %d, under a %d-byte limit", tt.name, n, used, limit)
		}
	}
	b, _ := (&HMGetRequest{Key: "ff:k", Fields: []string{"a", "bb"}}).MarshalBinary()
	var r HMGetRequest
	used, err := DecodeWithin(&r, b, 1<<10)
	if err != nil || len(r.Fields) != 2 || r.Fields[1] != "bb" || used < 3+2*16 {
		t.Fatalf("DecodeWithin of a small request: %+v, used %d, %v", r, used, err)
	}
}

// TestCountOf: a count above the bytes left divided by the elements'
// minimum size fails; one within it does not.
func TestCountOf(t *testing.T) {
	for _, tt := range []struct {
		count, left, min int
		ok               bool
	}{
		{3, 9, 3, true}, {4, 9, 3, false}, {9, 9, 1, true}, {10, 9, 1, false}, {0, 0, 8, true},
	} {
		b := binary.AppendUvarint(nil, uint64(tt.count))
		b = append(b, make([]byte, tt.left)...)
		d := NewDecoder(b)
		n := d.CountOf(tt.min)
		if ok := d.Err() == nil; ok != tt.ok || ok && n != tt.count {
			t.Errorf("CountOf(%d) of count %d with %d bytes left = %d, %v; want ok %v", tt.min, tt.count, tt.left, n, d.Err(), tt.ok)
		}
	}
}
