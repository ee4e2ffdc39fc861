package hostfn

import (
	"context"

	"github.com/fabric-host/fabric/abi"
)

// partitionFunction moves a batch call's Caller to one of its partitions:
// the host calls that follow are checked against that partition's hash
// tag, as if the plugin had been called for it alone. Outside a batch, or
// for a partition not in the batch, it answers -CodeCrossPartition and
// leaves the caller where it was. abi.PartitionWholeBatch selects every
// partition of the batch at once.
func partitionFunction() callback {
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		if c.begin(0) != nil {
			stack[0] = uint64(uint32(int32(codeNeg(abi.CodeBudget))))
			return
		}
		idx := uint32(stack[0])
		if idx == abi.PartitionWholeBatch && len(c.Batch) > 0 {
			c.WholeBatch = true
			stack[0] = 0
			return
		}
		tag, ok := c.Batch[uint16(idx)]
		if !ok || idx > 0xffff {
			c.Stats.denied("partition: index not in the batch")
			stack[0] = uint64(uint32(int32(codeNeg(abi.CodeCrossPartition))))
			return
		}
		c.Tag, c.WholeBatch = tag, false
		stack[0] = 0
	}
}
