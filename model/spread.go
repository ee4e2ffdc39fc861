package model

import (
	"errors"
	"strconv"

	"github.com/fabric-host/fabric/internal/errtext"
)

// SoloPartitioner picks the partition of an execution outside any flow.
// It is fabric's counterpart of FlowFabric's pluggable SoloPartitioner
// (solo_partition_with): the partition is baked into the execution id
// ({fp:N}:<uuid>), so every reader takes it from the id and never
// re-derives it; only producers must agree on the choice, which is why a
// lane's partitioner is stored with the lane (LaneConfigKey).
//
// key is what a spreading partitioner hashes to pick among the lane's
// partitions: the idempotency key when the execution has one (so a
// repeated enqueue lands on the partition holding the first one's
// idempotency record), else the execution's uuid bytes. FlowFabric's
// default ignores it.
type SoloPartitioner interface {
	SoloPartitionFor(lane string, key []byte, c PartitionConfig) Partition
}

// Crc16Solo is FlowFabric's default solo partitioner: crc16(lane) mod the
// flow partition count, one partition per lane.
type Crc16Solo struct{}

// SoloPartitionFor returns c.SoloPartition(lane).
func (Crc16Solo) SoloPartitionFor(lane string, _ []byte, c PartitionConfig) Partition {
	return c.SoloPartition(lane)
}

// SpreadSolo places a lane's executions over K partitions: the lane's
// FlowFabric partition (its home) and the K-1 partitions after it, wrapping
// around; crc16(key) mod K picks one. K of 0, or K at least the flow
// partition count, means every flow partition.
type SpreadSolo struct{ K uint16 }

// SoloPartitionFor returns one of the lane's spread partitions.
func (s SpreadSolo) SoloPartitionFor(lane string, key []byte, c PartitionConfig) Partition {
	k := s.width(c)
	home := c.SoloPartition(lane).Index
	i := CRC16(key) % k
	return Partition{Family: FamilyFlow, Index: uint16((uint32(home) + uint32(i)) % uint32(c.Flow))}
}

func (s SpreadSolo) width(c PartitionConfig) uint16 {
	if s.K == 0 || s.K >= c.Flow {
		return c.Flow
	}
	return s.K
}

// Partitions returns the lane's spread partitions, home first.
func (s SpreadSolo) Partitions(lane string, c PartitionConfig) []Partition {
	k := s.width(c)
	home := c.SoloPartition(lane).Index
	out := make([]Partition, k)
	for i := range out {
		out[i] = Partition{Family: FamilyFlow, Index: uint16((uint32(home) + uint32(i)) % uint32(c.Flow))}
	}
	return out
}

// SoloPartitionWith returns the partition p picks for an execution of lane
// hashed by key (FlowFabric's solo_partition_with).
func (c PartitionConfig) SoloPartitionWith(lane string, key []byte, p SoloPartitioner) Partition {
	if p == nil {
		return c.SoloPartition(lane)
	}
	return p.SoloPartitionFor(lane, key, c)
}

// NewSoloExecutionIDWith mints a fresh id for an execution of lane outside
// any flow on the partition p picks: hashed by idemKey when it is not
// empty, else by the new uuid.
func (c PartitionConfig) NewSoloExecutionIDWith(lane, idemKey string, p SoloPartitioner) ExecutionID {
	u := NewUUID()
	key := u[:]
	if idemKey != "" {
		key = []byte(idemKey)
	}
	return NewExecutionID(c.SoloPartitionWith(lane, key, p), u)
}

// LaneConfigKey is the lane's configuration hash, ff:lane:<lane>:config:
// a key FlowFabric defines (lane_config_key) and never reads or writes,
// so fabric's fields in it are invisible to FlowFabric. It carries no hash
// tag.
func LaneConfigKey(lane string) string { return "ff:lane:" + lane + ":config" }

// Fields of the lane configuration hash that fabric reads.
const (
	// LaneFieldSoloPartitioner names the lane's solo partitioner:
	// SoloPartitionerCrc16 (also when absent) or SoloPartitionerSpread.
	LaneFieldSoloPartitioner = "fabric_solo_partitioner"
	// LaneFieldSpreadPartitions is K for SoloPartitionerSpread (0 or
	// absent: every flow partition).
	LaneFieldSpreadPartitions = "fabric_spread_partitions"
)

// Values of LaneFieldSoloPartitioner.
const (
	SoloPartitionerCrc16  = "crc16"
	SoloPartitionerSpread = "spread"
)

// LaneSpread is a lane's solo-partitioner choice as stored in its
// configuration hash. The zero value is FlowFabric's default.
type LaneSpread struct {
	// Spread is true for SoloPartitionerSpread.
	Spread bool
	// K is the spread width (0: every flow partition).
	K uint16
}

// ParseLaneSpread reads a lane's choice from its configuration hash
// fields (a missing hash or field is FlowFabric's default).
func ParseLaneSpread(fields map[string]string) (LaneSpread, error) {
	switch v := fields[LaneFieldSoloPartitioner]; v {
	case "", SoloPartitionerCrc16:
		return LaneSpread{}, nil
	case SoloPartitionerSpread:
	default:
		return LaneSpread{}, errors.New("model: lane " + LaneFieldSoloPartitioner + " " + errtext.Q(v) + " is not " +
			SoloPartitionerCrc16 + " or " + SoloPartitionerSpread)
	}
	s := LaneSpread{Spread: true}
	if v := fields[LaneFieldSpreadPartitions]; v != "" {
		k, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return LaneSpread{}, errtext.Wrap(err, "model: lane "+LaneFieldSpreadPartitions+" "+errtext.Q(v)+": "+err.Error())
		}
		s.K = uint16(k)
	}
	return s, nil
}

// Fields renders the choice as configuration hash fields.
func (s LaneSpread) Fields() map[string]string {
	if !s.Spread {
		return map[string]string{LaneFieldSoloPartitioner: SoloPartitionerCrc16, LaneFieldSpreadPartitions: "0"}
	}
	return map[string]string{LaneFieldSoloPartitioner: SoloPartitionerSpread,
		LaneFieldSpreadPartitions: strconv.FormatUint(uint64(s.K), 10)}
}

// Partitioner returns the SoloPartitioner of the choice.
func (s LaneSpread) Partitioner() SoloPartitioner {
	if !s.Spread {
		return Crc16Solo{}
	}
	return SpreadSolo{K: s.K}
}

// Partitions returns the partitions a lane's solo executions can be on
// under this choice, home first.
func (s LaneSpread) Partitions(lane string, c PartitionConfig) []Partition {
	if !s.Spread {
		return []Partition{c.SoloPartition(lane)}
	}
	return SpreadSolo{K: s.K}.Partitions(lane, c)
}

// ClusterSlot returns the Valkey Cluster hash slot of a key: CRC16 of its
// hash tag (the text between the first '{' and the next '}', when not
// empty) or of the whole key, mod 16384.
func ClusterSlot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					return CRC16([]byte(key)) % 16384
				}
			}
			break
		}
	}
	return CRC16([]byte(key)) % 16384
}
