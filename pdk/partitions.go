package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// Config keys carrying the deployment's budget and quota partition
// counts, for plugins of one family that locate keys of another (the
// unblock scanner, on flow partitions, reads budgets and quotas). The host
// fills both from its partition config before the manifest's defaults
// apply; an operator's entry for the plugin wins over both.
const (
	ConfigBudgetPartitions = abi.ConfigBudgetPartitions
	ConfigQuotaPartitions  = abi.ConfigQuotaPartitions
)

// PartitionsFromConfig returns the deployment's partition counts as a
// plugin sees them: flow from the request (the family it sweeps), budget
// and quota from ConfigBudgetPartitions and ConfigQuotaPartitions (the
// defaults when missing or not a positive count).
func PartitionsFromConfig(h Host, flow uint16) model.PartitionConfig {
	c := model.DefaultPartitionConfig()
	if flow > 0 {
		c.Flow = flow
	}
	for key, dst := range map[string]*uint16{ConfigBudgetPartitions: &c.Budget, ConfigQuotaPartitions: &c.Quota} {
		if v, ok := h.Config(key); ok {
			if n, err := strconv.ParseUint(v, 10, 16); err == nil && n > 0 {
				*dst = uint16(n)
			}
		}
	}
	return c
}
