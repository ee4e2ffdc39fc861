package valkey_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// Every budget / quota / flow function answers missing or garbage ARGV
// with a reply (an error reply where the input is unusable), never with a
// Lua runtime error.
func TestFamilyBadInputNeverRuntimeError(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 20*time.Second)
	fns := map[string]int{
		"ff_create_budget": 5, "ff_report_usage_and_check": 3, "ff_record_spend": 5, "ff_release_budget": 3,
		"ff_reset_budget": 3, "ff_unblock_execution": 3, "ff_block_execution_for_admission": 3,
		"ff_create_quota_policy": 5, "ff_check_admission_and_record": 5, "ff_release_admission": 3,
		"ff_create_flow": 3, "ff_add_execution_to_flow": 4, "ff_cancel_flow": 5, "ff_ack_cancel_member": 2,
		"ff_stage_dependency_edge": 6, "ff_set_edge_group_policy": 2, "ff_apply_dependency_to_child": 8,
		"ff_resolve_dependency": 14, "ff_drain_sibling_cancel_group": 2, "ff_reconcile_sibling_cancel_group": 2,
		"ff_evaluate_flow_eligibility": 2, "ff_promote_blocked_to_eligible": 5, "ff_replay_execution": 4,
		"ff_set_flow_tags": 2,
	}
	argvs := [][]string{
		{},
		{"x"},
		{"x", "y", "z"},
		{"9", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"},
		{"1", "", "", "", "", "", "", "", "", "", ""},
	}
	for fn, nkeys := range fns {
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("ff:test:{fp:1}:%s:%d", fn, i)
		}
		for _, args := range argvs {
			if _, err := c.FCallRaw(ctx, fn, keys, args); err != nil {
				t.Errorf("%s %q: runtime error %v", fn, args, err)
			}
		}
	}
	// Existing records with garbage ARGV.
	flow, fk := famFlow(t, c)
	e := famMember(t, c, flow, "default", 1)
	for _, args := range argvs {
		for fn, keys := range map[string][]string{
			"ff_add_execution_to_flow":         {fk.Core(), fk.Members(), "i", model.KeysFor(e).Core()},
			"ff_stage_dependency_edge":         {fk.Core(), fk.Members(), "e", "o", "i", "g"},
			"ff_cancel_flow":                   {fk.Core(), fk.Members(), "i", "p", "b"},
			"ff_set_edge_group_policy":         {fk.Core(), "g"},
			"ff_set_flow_tags":                 {fk.Core(), "t"},
			"ff_unblock_execution":             {model.KeysFor(e).Core(), "b", "e"},
			"ff_block_execution_for_admission": {model.KeysFor(e).Core(), "e", "b"},
		} {
			if _, err := c.FCallRaw(ctx, fn, keys, args); err != nil {
				t.Errorf("%s %q on live records: runtime error %v", fn, args, err)
			}
		}
	}
}
