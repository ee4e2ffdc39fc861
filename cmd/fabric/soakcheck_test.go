package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/model"
)

// countTerminal counts the executions of ids whose lifecycle_phase is
// terminal.
func countTerminal(ctx context.Context, vc *valkey.Client, ids []model.ExecutionID) (int, error) {
	phases, err := valkeyPhases(ctx, vc, ids)
	done := 0
	for _, ph := range phases {
		if ph == model.PhaseTerminal {
			done++
		}
	}
	return done, err
}

// valkeyPhases reads the lifecycle_phase of each of ids ("" for an
// execution that does not exist; a runnable one's eligibility_state
// after a slash), in pipelined pages.
func valkeyPhases(ctx context.Context, vc *valkey.Client, ids []model.ExecutionID) ([]string, error) {
	raw := vc.Raw()
	phases := make([]string, 0, len(ids))
	for start := 0; start < len(ids); start += 500 {
		end := min(start+500, len(ids))
		cmds := make([]valkeyCompleted, 0, end-start)
		for _, id := range ids[start:end] {
			cmds = append(cmds, raw.B().Hmget().Key(model.KeysFor(id).Core()).Field("lifecycle_phase", "eligibility_state").Build())
		}
		for _, r := range raw.DoMulti(ctx, cmds...) {
			vs, err := r.ToArray()
			if err != nil {
				return nil, err
			}
			var ph, elig string
			if len(vs) == 2 {
				ph, _ = vs[0].ToString()
				elig, _ = vs[1].ToString()
			}
			phases = append(phases, phaseOf(ph, elig))
		}
	}
	return phases, nil
}

// phaseOf is a lifecycle phase as the soak reports it: a runnable
// execution's eligibility after a slash (eligible now, delayed, blocked).
func phaseOf(phase, eligibility string) string {
	if phase == "runnable" {
		return phase + "/" + eligibility
	}
	return phase
}

// describeUnfinished logs the state of up to max executions of ids that
// are not terminal.
func describeUnfinished(t *testing.T, vc *valkey.Client, ids []model.ExecutionID, max int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw := vc.Raw()
	shown := 0
	for _, id := range ids {
		core, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeysFor(id).Core()).Build()).AsStrMap()
		if err != nil || core["lifecycle_phase"] == model.PhaseTerminal {
			continue
		}
		t.Logf("unfinished %s: phase=%s ownership=%s eligibility=%s blocking=%s attempt_state=%s attempts=%s lane=%s kind=%s delay_until=%s",
			id, core["lifecycle_phase"], core["ownership_state"], core["eligibility_state"], core["blocking_reason"],
			core["attempt_state"], core["attempt_count"], core["lane_id"], core["execution_kind"], core["delay_until"])
		if shown++; shown == max {
			return
		}
	}
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
				// What ended it, for the post-mortem.
				why, _ := raw.Do(ctx, raw.B().Hmget().Key(model.KeysFor(id).Core()).
					Field("execution_kind", "attempt_count", "last_failure_message").Build()).AsStrSlice()
				notCompleted = append(notCompleted, fmt.Sprintf("%s=%s %q", id, state, why))
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

// valkeySoakTarget is the soak on a private Valkey server with its
// append-only file on (fsync every second: a kill -9 of the server loses
// no write it answered, as the file is written before the answer).
func valkeySoakTarget(t *testing.T, ctx context.Context) *soakTarget {
	srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: valkeytest.Logger(),
		ExtraArgs: []string{"--appendonly", "yes", "--appendfsync", "everysec"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: srv.URL(), Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vc.Close() })
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: soakLanes}); err != nil {
		t.Fatal(err)
	}
	if err := vc.InstallWaitpointHMACSecret(ctx, "00112233445566778899aabbccddeeff"); err != nil {
		t.Fatal(err)
	}
	return &soakTarget{name: "valkey", provider: vc,
		hostArgs: func(i int) []string {
			// A restarted host keeps its id, so it takes its own partition
			// leases back at once; a short TTL bounds a dead host's gap.
			return []string{"--valkey-url", srv.URL(), "--host-id", fmt.Sprintf("soak-host-%d", i), "--lease-ttl", "2s"}
		},
		plugins: append(slices.Clone(host.DefaultPlugins), host.FlowEnginePlugins...),
		restarts: [3]soakServerFault{{"graceful restart (SIGTERM)", srv.RestartGracefully},
			{"kill -9 (AOF on)", srv.Restart}, {"graceful restart (SIGTERM)", srv.RestartGracefully}},
		phases: func(ctx context.Context, ids []model.ExecutionID) ([]string, error) {
			return valkeyPhases(ctx, vc, ids)
		},
		check: func(t *testing.T, ctx context.Context, ids []model.ExecutionID) {
			checkCompletedOnce(t, ctx, vc, ids, len(ids))
		},
		describe: func(t *testing.T, ids []model.ExecutionID) { describeUnfinished(t, vc, ids, 5) },
	}
}
