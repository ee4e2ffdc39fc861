package model

import (
	"errors"
	"strings"
	"testing"
)

func TestCRC16(t *testing.T) {
	tests := []struct {
		in   []byte
		want uint16
	}{
		{[]byte("123456789"), 0x31C3},
		{[]byte("default"), 0xD656},
		{[]byte("workers-a"), 0x2EC1},
		{MustParseUUID("550e8400-e29b-41d4-a716-446655440000").bytes(), 0x9018},
		{nil, 0},
	}
	for _, tt := range tests {
		if got := CRC16(tt.in); got != tt.want {
			t.Errorf("CRC16(%q) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
}

func (u UUID) bytes() []byte { return u[:] }

func TestPartitionMapping(t *testing.T) {
	c := DefaultPartitionConfig()
	u := MustParseUUID("550e8400-e29b-41d4-a716-446655440000")
	if got := c.FlowPartition(u); got.Index != 24 || got.Tag() != "{fp:24}" {
		t.Fatalf("FlowPartition = %v", got)
	}
	if got := c.BudgetPartition(u); got.Index != 24 || got.Tag() != "{b:24}" {
		t.Fatalf("BudgetPartition = %v", got)
	}
	if got := c.QuotaPartition(u); got.Tag() != "{q:24}" {
		t.Fatalf("QuotaPartition = %v", got)
	}
	if got := c.SoloPartition("default"); got.Index != 86 {
		t.Fatalf("SoloPartition(default) = %v, want 86", got)
	}
	if got := c.SoloPartition("workers-a"); got.Index != 193 {
		t.Fatalf("SoloPartition(workers-a) = %v, want 193", got)
	}
	// Property: every solo id lands below the partition count and its
	// embedded partition equals the lane's partition.
	for i := 0; i < 1000; i++ {
		lane := "lane-" + NewUUID().String()[:8]
		id := c.NewSoloExecutionID(lane)
		if id.Partition() != c.SoloPartition(lane) || id.Partition().Index >= c.Flow {
			t.Fatalf("solo id %s partition %v, lane partition %v", id, id.Partition(), c.SoloPartition(lane))
		}
		if _, err := ParseExecutionID(string(id)); err != nil {
			t.Fatalf("minted id does not parse: %v", err)
		}
	}
	if err := (PartitionConfig{Flow: 0, Budget: 1, Quota: 1}).Validate(); err == nil {
		t.Fatal("zero partition count accepted")
	}
}

func TestParsePartitionTag(t *testing.T) {
	tests := []struct {
		in      string
		want    Partition
		wantErr error
	}{
		{"{fp:7}", Partition{FamilyFlow, 7}, nil},
		{"{b:31}", Partition{FamilyBudget, 31}, nil},
		{"{q:0}", Partition{FamilyQuota, 0}, nil},
		{"fp:7", Partition{}, ErrTagMissingBraces},
		{"{fp7}", Partition{}, ErrTagMalformedBody},
		{"{p:7}", Partition{}, ErrTagUnknownFamily},
		{"{fp:70000}", Partition{}, ErrTagInvalidIndex},
		{"{fp:-1}", Partition{}, ErrTagInvalidIndex},
	}
	for _, tt := range tests {
		got, err := ParsePartitionTag(tt.in)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("ParsePartitionTag(%q) = %v, %v; want %v, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseExecutionID(t *testing.T) {
	tests := []struct {
		in      string
		wantErr error
	}{
		{"{fp:42}:550e8400-e29b-41d4-a716-446655440000", nil},
		{"{fp:0}:00000000-0000-0000-0000-000000000000", nil},
		{"550e8400-e29b-41d4-a716-446655440000", ErrExecIDMissingTag},
		{"{fp:42}550e8400-e29b-41d4-a716-446655440000", ErrExecIDMissingTag},
		{"{fp:x}:550e8400-e29b-41d4-a716-446655440000", ErrExecIDInvalidIndex},
		{"{fp:42}:not-a-uuid", ErrExecIDInvalidUUID},
		{"{fp:42}:550e8400-e29b-41d4-a716-44665544000g", ErrExecIDInvalidUUID},
		{"", ErrExecIDMissingTag},
	}
	for _, tt := range tests {
		_, err := ParseExecutionID(tt.in)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("ParseExecutionID(%q) err = %v, want %v", tt.in, err, tt.wantErr)
		}
	}
	id := ExecutionID("{fp:42}:550e8400-e29b-41d4-a716-446655440000")
	if id.Partition().Index != 42 || id.UUIDString() != "550e8400-e29b-41d4-a716-446655440000" {
		t.Fatalf("decode: %v %s", id.Partition(), id.UUIDString())
	}
}

func TestUUIDRoundTrip(t *testing.T) {
	for i := 0; i < 100; i++ {
		u := NewUUID()
		s := u.String()
		if s[14] != '4' || !strings.ContainsRune("89ab", rune(s[19])) {
			t.Fatalf("not a v4 uuid: %s", s)
		}
		back, err := ParseUUID(strings.ToUpper(s))
		if err != nil || back != u {
			t.Fatalf("round trip %s: %v %v", s, back, err)
		}
	}
}

func TestKeys(t *testing.T) {
	id := ExecutionID("{fp:7}:550e8400-e29b-41d4-a716-446655440000")
	k := KeysFor(id)
	tests := []struct{ got, want string }{
		{k.Core(), "ff:exec:{fp:7}:{fp:7}:550e8400-e29b-41d4-a716-446655440000:core"},
		{k.Attempt(2), "ff:attempt:{fp:7}:{fp:7}:550e8400-e29b-41d4-a716-446655440000:2"},
		{k.AttemptUsage(0), "ff:attempt:{fp:7}:{fp:7}:550e8400-e29b-41d4-a716-446655440000:0:usage"},
		{k.StreamMeta(1), "ff:stream:{fp:7}:{fp:7}:550e8400-e29b-41d4-a716-446655440000:1:meta"},
		{k.SuspendDedup("x"), "ff:dedup:suspend:{fp:7}:{fp:7}:550e8400-e29b-41d4-a716-446655440000:x"},
		{KeysOn(id.Partition()).LaneEligible("default"), "ff:idx:{fp:7}:lane:default:eligible"},
		{KeysOn(id.Partition()).WorkerLeases(""), "ff:idx:{fp:7}:worker::leases"},
		{KeysOn(id.Partition()).Waitpoint("w"), "ff:wp:{fp:7}:w"},
		{KeysOn(id.Partition()).Noop(), "ff:noop:{fp:7}"},
		{KeysOn(id.Partition()).Idempotency("ns", "k"), "ff:idem:{fp:7}:ns:k"},
		{WorkerAliveKey("tenant-a", "w1"), "ff:worker:tenant-a:w1:alive"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q want %q", tt.got, tt.want)
		}
	}
}

func TestDerivePublicState(t *testing.T) {
	tests := []struct{ phase, elig, outcome, want string }{
		{PhaseTerminal, "", OutcomeSuccess, PublicCompleted},
		{PhaseTerminal, "", OutcomeNone, PublicFailed},
		{PhaseRunnable, EligibleNotUntilTime, OutcomeNone, PublicDelayed},
		{PhaseRunnable, EligibleBlockedByQuota, OutcomeNone, PublicRateLimited},
		{PhaseRunnable, EligibleBlockedByRoute, OutcomeNone, PublicWaiting},
		{PhaseSubmitted, "", "", PublicWaiting},
	}
	for _, tt := range tests {
		if got := DerivePublicState(tt.phase, tt.elig, tt.outcome); got != tt.want {
			t.Errorf("DerivePublicState(%s,%s,%s)=%s want %s", tt.phase, tt.elig, tt.outcome, got, tt.want)
		}
	}
}

func TestFNV1a64(t *testing.T) {
	// Published FNV-1a 64 test vectors.
	for in, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := FNV1a64(in); got != want {
			t.Errorf("FNV1a64(%q) = %#x, want %#x", in, got, want)
		}
	}
}
