package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestBudgetQuotaBadInputFailsBeforeNetwork: invalid budgets and quotas
// are refused by a client whose connection is closed, so any network
// call would have failed otherwise.
func TestBudgetQuotaBadInputFailsBeforeNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	vc := valkeytest.Dial(t, valkeytest.Server(t).URL(), 0)
	c, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	vc.Close()
	for name, bud := range map[string]sdk.Budget{
		"NoLimits":      {},
		"EmptyDim":      {Limits: map[string]sdk.BudgetLimit{"": {Hard: 1}}},
		"ColonDim":      {Limits: map[string]sdk.BudgetLimit{"a:b": {Hard: 1}}},
		"Negative":      {Limits: map[string]sdk.BudgetLimit{"t": {Hard: -1}}},
		"SoftOverHard":  {Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1, Soft: 2}}},
		"NegativeReset": {Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1}}, ResetEvery: -time.Second},
		"SubMsReset":    {Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1}}, ResetEvery: time.Microsecond},
	} {
		if _, err := c.CreateBudget(b.ctx, bud); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("budget %s: %v", name, err)
		}
	}
	for name, q := range map[string]sdk.Quota{
		"NoWindow":      {MaxPerWindow: 1},
		"SubSecond":     {Window: 1500 * time.Millisecond, MaxPerWindow: 1},
		"NoLimits":      {Window: time.Second},
		"NegativeLimit": {Window: time.Second, MaxPerWindow: -1, MaxConcurrent: 1},
	} {
		if _, err := c.CreateQuota(b.ctx, q); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("quota %s: %v", name, err)
		}
	}
	if _, err := c.BudgetUsage(b.ctx, model.UUID{}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("budget usage without id: %v", err)
	}
	if _, err := c.QuotaUsage(b.ctx, model.UUID{}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("quota usage without id: %v", err)
	}
}
