package model

import (
	"errors"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/internal/errtext"
)

// Family is a partition family. Each family has its own hash-tag prefix and
// partition count.
type Family uint8

const (
	// FamilyFlow is the flow/execution family, hash tag {fp:N}. Executions
	// share it with flows (FlowFabric's co-location rule).
	FamilyFlow Family = iota
	// FamilyBudget is the budget family, hash tag {b:M}.
	FamilyBudget
	// FamilyQuota is the quota family, hash tag {q:K}.
	FamilyQuota
)

// Prefix returns the hash-tag prefix of the family: "fp", "b" or "q".
func (f Family) Prefix() string {
	switch f {
	case FamilyFlow:
		return "fp"
	case FamilyBudget:
		return "b"
	case FamilyQuota:
		return "q"
	}
	return "?"
}

// String returns the family's name.
func (f Family) String() string {
	switch f {
	case FamilyFlow:
		return "flow"
	case FamilyBudget:
		return "budget"
	case FamilyQuota:
		return "quota"
	}
	return "unknown"
}

// ParseFamily parses a family name ("flow", "execution", "budget", "quota")
// or its tag prefix ("fp", "b", "q").
func ParseFamily(s string) (Family, error) {
	switch s {
	case "flow", "execution", "fp":
		return FamilyFlow, nil
	case "budget", "b":
		return FamilyBudget, nil
	case "quota", "q":
		return FamilyQuota, nil
	}
	return 0, errors.New("model: unknown partition family " + errtext.Q(s) + " (want flow, budget or quota)")
}

// Partition is one partition of one family.
type Partition struct {
	Family Family
	Index  uint16
}

// Tag renders the partition's hash tag, e.g. "{fp:7}".
func (p Partition) Tag() string {
	return "{" + p.Family.Prefix() + ":" + strconv.FormatUint(uint64(p.Index), 10) + "}"
}

// String is the hash tag.
func (p Partition) String() string { return p.Tag() }

// Errors returned by ParsePartitionTag.
var (
	ErrTagMissingBraces = errors.New("model: partition tag must be wrapped in braces")
	ErrTagMalformedBody = errors.New("model: partition tag body must be prefix:index")
	ErrTagUnknownFamily = errors.New("model: partition tag has an unknown family prefix")
	ErrTagInvalidIndex  = errors.New("model: partition tag index is not a u16")
)

// ParsePartitionTag parses a hash tag such as "{fp:7}" back into a Partition.
func ParsePartitionTag(s string) (Partition, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return Partition{}, errtext.Wrap(ErrTagMissingBraces, ErrTagMissingBraces.Error()+": "+errtext.Q(s))
	}
	prefix, idx, ok := strings.Cut(s[1:len(s)-1], ":")
	if !ok {
		return Partition{}, errtext.Wrap(ErrTagMalformedBody, ErrTagMalformedBody.Error()+": "+errtext.Q(s))
	}
	var fam Family
	switch prefix {
	case "fp":
		fam = FamilyFlow
	case "b":
		fam = FamilyBudget
	case "q":
		fam = FamilyQuota
	default:
		return Partition{}, errtext.Wrap(ErrTagUnknownFamily, ErrTagUnknownFamily.Error()+": "+errtext.Q(s))
	}
	n, err := strconv.ParseUint(idx, 10, 16)
	if err != nil {
		return Partition{}, errtext.Wrap(ErrTagInvalidIndex, ErrTagInvalidIndex.Error()+": "+errtext.Q(s))
	}
	return Partition{Family: fam, Index: uint16(n)}, nil
}

// Default partition counts (FlowFabric's PartitionConfig::default).
const (
	DefaultFlowPartitions   = 256
	DefaultBudgetPartitions = 32
	DefaultQuotaPartitions  = 32
)

// PartitionConfig holds the partition count of each family. Counts are fixed
// for the lifetime of a deployment and stored in the ff:config:partitions
// hash.
type PartitionConfig struct {
	// Flow is num_flow_partitions (default 256).
	Flow uint16
	// Budget is num_budget_partitions (default 32).
	Budget uint16
	// Quota is num_quota_partitions (default 32).
	Quota uint16
}

// DefaultPartitionConfig returns 256/32/32.
func DefaultPartitionConfig() PartitionConfig {
	return PartitionConfig{Flow: DefaultFlowPartitions, Budget: DefaultBudgetPartitions, Quota: DefaultQuotaPartitions}
}

// Validate reports a zero count, which FlowFabric cannot route with.
func (c PartitionConfig) Validate() error {
	if c.Flow == 0 || c.Budget == 0 || c.Quota == 0 {
		return errors.New("model: partition counts must be > 0 (flow=" + errtext.U(c.Flow) + " budget=" + errtext.U(c.Budget) + " quota=" + errtext.U(c.Quota) + ")")
	}
	return nil
}

// Count returns the partition count of a family.
func (c PartitionConfig) Count(f Family) uint16 {
	switch f {
	case FamilyBudget:
		return c.Budget
	case FamilyQuota:
		return c.Quota
	}
	return c.Flow
}

// Fields of the ff:config:partitions hash.
const (
	ConfigFieldFlowPartitions   = "num_flow_partitions"
	ConfigFieldBudgetPartitions = "num_budget_partitions"
	ConfigFieldQuotaPartitions  = "num_quota_partitions"
)

// CRC16 is CRC-16/XMODEM (poly 0x1021, init 0, no reflection, no final xor),
// the checksum FlowFabric hashes partitions with.
func CRC16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// FlowPartition returns the partition of a flow: crc16(uuid bytes) mod the
// flow partition count.
func (c PartitionConfig) FlowPartition(id UUID) Partition {
	return Partition{Family: FamilyFlow, Index: CRC16(id[:]) % c.Flow}
}

// BudgetPartition returns the partition of a budget.
func (c PartitionConfig) BudgetPartition(id UUID) Partition {
	return Partition{Family: FamilyBudget, Index: CRC16(id[:]) % c.Budget}
}

// QuotaPartition returns the partition of a quota policy.
func (c PartitionConfig) QuotaPartition(id UUID) Partition {
	return Partition{Family: FamilyQuota, Index: CRC16(id[:]) % c.Quota}
}

// SoloPartition returns the partition of an execution outside any flow:
// crc16 of the lane id's UTF-8 bytes mod the flow partition count.
func (c PartitionConfig) SoloPartition(lane string) Partition {
	return Partition{Family: FamilyFlow, Index: CRC16([]byte(lane)) % c.Flow}
}
