package model

import "testing"

func TestSoloPartitioners(t *testing.T) {
	c := DefaultPartitionConfig()
	lane := "spread-lane"
	if got := c.SoloPartitionWith(lane, []byte("x"), Crc16Solo{}); got != c.SoloPartition(lane) {
		t.Fatalf("Crc16Solo = %v, want FlowFabric's %v", got, c.SoloPartition(lane))
	}
	if got := c.SoloPartitionWith(lane, nil, nil); got != c.SoloPartition(lane) {
		t.Fatalf("nil partitioner = %v, want the default", got)
	}
	s := SpreadSolo{K: 8}
	parts := s.Partitions(lane, c)
	if len(parts) != 8 || parts[0] != c.SoloPartition(lane) {
		t.Fatalf("spread partitions %v: want 8, home first", parts)
	}
	in := map[Partition]bool{}
	for _, p := range parts {
		in[p] = true
	}
	seen := map[Partition]int{}
	for i := 0; i < 2000; i++ {
		id := c.NewSoloExecutionIDWith(lane, "", s)
		if !in[id.Partition()] {
			t.Fatalf("%s is outside the lane's spread partitions", id)
		}
		seen[id.Partition()]++
	}
	if len(seen) != 8 {
		t.Fatalf("2000 ids used %d of 8 partitions", len(seen))
	}
	a := c.NewSoloExecutionIDWith(lane, "idem-1", s)
	b := c.NewSoloExecutionIDWith(lane, "idem-1", s)
	if a.Partition() != b.Partition() || a == b {
		t.Fatalf("same idempotency key: %s and %s, want one partition and two ids", a, b)
	}
	if n := len(SpreadSolo{}.Partitions(lane, c)); n != int(c.Flow) {
		t.Fatalf("K=0 spreads over %d partitions, want %d", n, c.Flow)
	}
	small := PartitionConfig{Flow: 4, Budget: 1, Quota: 1}
	for _, p := range (SpreadSolo{K: 9}).Partitions(lane, small) {
		if p.Index >= 4 {
			t.Fatalf("partition %v outside 4 flow partitions", p)
		}
	}
}

func TestLaneSpreadFields(t *testing.T) {
	for _, s := range []LaneSpread{{}, {Spread: true}, {Spread: true, K: 12}} {
		got, err := ParseLaneSpread(s.Fields())
		if err != nil || got != s {
			t.Fatalf("round trip of %+v: %+v, %v", s, got, err)
		}
	}
	if s, err := ParseLaneSpread(nil); err != nil || s.Spread {
		t.Fatalf("absent config = %+v, %v; want the default", s, err)
	}
	for _, bad := range []map[string]string{{LaneFieldSoloPartitioner: "ring"},
		{LaneFieldSoloPartitioner: "spread", LaneFieldSpreadPartitions: "-1"}} {
		if _, err := ParseLaneSpread(bad); err == nil {
			t.Fatalf("%v parsed", bad)
		}
	}
	if LaneConfigKey("a") != "ff:lane:a:config" {
		t.Fatal(LaneConfigKey("a"))
	}
}

func TestClusterSlot(t *testing.T) {
	// Known slots (CLUSTER KEYSLOT): "foo" 12182, "{user1000}.following" 3443.
	for key, want := range map[string]uint16{"foo": 12182, "{user1000}.following": 3443,
		"{}foo": ClusterSlot("{}foo"), "ff:idx:{fp:7}:x": ClusterSlot("{fp:7}")} {
		if got := ClusterSlot(key); got != want {
			t.Fatalf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	if ClusterSlot("{}foo") != CRC16([]byte("{}foo"))%16384 {
		t.Fatal("an empty tag hashes the whole key")
	}
}
