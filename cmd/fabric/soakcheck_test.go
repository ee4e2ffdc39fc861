package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// countTerminal counts the executions of ids whose lifecycle_phase is
// terminal, in pipelined pages.
func countTerminal(ctx context.Context, vc *valkey.Client, ids []model.ExecutionID) (int, error) {
	raw := vc.Raw()
	done := 0
	for start := 0; start < len(ids); start += 500 {
		end := min(start+500, len(ids))
		cmds := make([]valkeyCompleted, 0, end-start)
		for _, id := range ids[start:end] {
			cmds = append(cmds, raw.B().Hget().Key(model.KeysFor(id).Core()).Field("lifecycle_phase").Build())
		}
		for _, r := range raw.DoMulti(ctx, cmds...) {
			ph, err := r.ToString()
			if err != nil && !vk.IsValkeyNil(err) {
				return 0, err
			}
			if ph == model.PhaseTerminal {
				done++
			}
		}
	}
	return done, nil
}

// checkCompletedOnce asserts what a soak promises: every execution of ids
// completed, with exactly one completion in its lease history (counted
// from the history's released/completed events, not from any counter),
// and the audit invariant holds over the whole deployment with all n
// executions terminal.
func checkCompletedOnce(t *testing.T, ctx context.Context, vc *valkey.Client, ids []model.ExecutionID, n int) {
	t.Helper()
	raw := vc.Raw()
	var notCompleted, doubled []string
	for s := 0; s < len(ids); s += 250 {
		end := min(s+250, len(ids))
		var cmds []valkeyCompleted
		for _, id := range ids[s:end] {
			k := model.KeysFor(id)
			cmds = append(cmds, raw.B().Hget().Key(k.Core()).Field("public_state").Build(),
				raw.B().Xrange().Key(k.LeaseHistory()).Start("-").End("+").Build())
		}
		res := raw.DoMulti(ctx, cmds...)
		for i, id := range ids[s:end] {
			if state, _ := res[2*i].ToString(); state != "completed" {
				notCompleted = append(notCompleted, fmt.Sprintf("%s=%s", id, state))
			}
			entries, err := res[2*i+1].AsXRange()
			if err != nil {
				t.Fatalf("lease history of %s: %v", id, err)
			}
			completions := 0
			for _, e := range entries {
				if e.FieldValues["event"] == "released" && e.FieldValues["reason"] == "completed" {
					completions++
				}
			}
			if completions != 1 {
				doubled = append(doubled, fmt.Sprintf("%s: %d completions", id, completions))
			}
		}
	}
	if len(ids) != n {
		t.Fatalf("%d executions created, want %d", len(ids), n)
	}
	if len(notCompleted) > 0 {
		t.Errorf("%d executions not completed, e.g. %v", len(notCompleted), notCompleted[:min(5, len(notCompleted))])
	}
	if len(doubled) > 0 {
		t.Errorf("%d executions without exactly one completion, e.g. %v", len(doubled), doubled[:min(5, len(doubled))])
	}
	// The invariant every run keeps (internal/audit): each execution
	// ended or states why it waits; here all ended.
	rep, err := audit.Valkey(ctx, vc, audit.Options{})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	if !rep.OK() || rep.Checked != n || rep.Terminal != n {
		t.Errorf("audit: %s, want %d terminal; violations %v", rep.Summary(), n, rep.Violations)
	}
}
