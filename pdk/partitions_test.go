package pdk_test

import (
	"testing"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

func TestPartitionsFromConfig(t *testing.T) {
	t.Parallel()
	h := pdktest.New(t, pdk.Scanner("p", 1000, 10, nil, nil, map[string]string{pdk.ConfigBudgetPartitions: "32"}))
	def := model.DefaultPartitionConfig()
	if got := pdk.PartitionsFromConfig(h, 0); got != def {
		t.Fatalf("defaults: %+v", got)
	}
	h.ConfigValues[pdk.ConfigBudgetPartitions] = "2"
	h.ConfigValues[pdk.ConfigQuotaPartitions] = "7"
	if got := pdk.PartitionsFromConfig(h, 4); got != (model.PartitionConfig{Flow: 4, Budget: 2, Quota: 7}) {
		t.Fatalf("configured: %+v", got)
	}
	for _, bad := range []string{"0", "-1", "x", "70000"} {
		h.ConfigValues[pdk.ConfigBudgetPartitions] = bad
		if got := pdk.PartitionsFromConfig(h, 4); got.Budget != def.Budget {
			t.Fatalf("%q: budget %d, want the default", bad, got.Budget)
		}
	}
}
