package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/model"
)

// TestGroupUsage: `fabric periodic --help` (and `fabric help periodic`)
// prints the group's subcommands and exits 0; `fabric executions` alone
// names its subcommands with what each does, not "unknown command".
func TestGroupUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"periodic", "--help"}, {"periodic", "-h"}, {"help", "periodic"}} {
		code, out, errOut := runCmd(t, args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "Usage: fabric periodic <subcommand>") ||
			!strings.Contains(out, "  add ") || !strings.Contains(out, "  list ") || !strings.Contains(out, "  remove ") {
			t.Errorf("%q: exit %d\nstdout %s\nstderr %s", args, code, out, errOut)
		}
	}
	code, out, errOut := runCmd(t, "executions")
	if code != 2 || out != "" || strings.Contains(errOut, "unknown command") ||
		!strings.Contains(errOut, "  list       List executions") || !strings.Contains(errOut, "  show ") {
		t.Fatalf("executions alone: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "executions", "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "executions frobnicate"`) {
		t.Fatalf("unknown subcommand: exit %d, %s", code, errOut)
	}
}

// deadAdmin is the URL of a port nothing listens on.
func deadAdmin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestEmptyIDIsUsageError: an empty id (or name) is a usage error, exit
// 2, before any request — not "no API route GET /api/executions/".
func TestEmptyIDIsUsageError(t *testing.T) {
	t.Parallel()
	dead := deadAdmin(t)
	for _, args := range [][]string{
		{"executions", "show", ""}, {"executions", "show", "  "}, {"executions", "cancel", ""}, {"executions", "retry", ""},
		{"executions", "priority", "", "5"}, {"executions", "signal", "", "approve"}, {"executions", "signal", "x", ""},
		{"flows", "show", ""}, {"lanes", "pause", ""},
	} {
		code, _, errOut := runCmd(t, append(args, "--admin", dead)...)
		if code != 2 || !strings.Contains(errOut, " is empty") || strings.Contains(errOut, "API route") || strings.Contains(errOut, "refused") {
			t.Errorf("%q: exit %d, stderr %s", args, code, errOut)
		}
	}
}

// TestConnectionErrorSaysURLOnce: a host that does not answer is named
// once in the error, with the hint.
func TestConnectionErrorSaysURLOnce(t *testing.T) {
	t.Parallel()
	dead := deadAdmin(t)
	code, _, errOut := runCmd(t, "executions", "list", "--admin", dead)
	if code != 1 || strings.Count(errOut, dead) != 1 || !strings.Contains(errOut, "connection refused") || !strings.Contains(errOut, "is `fabric run` running?") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
}

// TestFlowStateFromMembers: a flow whose members all completed reads
// completed (FlowFabric's record says open for ever, and the projector's
// summary lags or is missing); one that failed reads failed; a cancelled
// record wins; otherwise the projector's summary, else the record.
func TestFlowStateFromMembers(t *testing.T) {
	t.Parallel()
	flow := func(rec, summary string, states ...string) *admin.FlowView {
		f := &admin.FlowView{ID: "f1", Core: map[string]string{"public_flow_state": rec}, SummaryState: summary}
		for i, st := range states {
			f.Nodes = append(f.Nodes, admin.ExecutionRow{ID: string(rune('a' + i)), State: st})
		}
		return f
	}
	for _, c := range []struct {
		f    *admin.FlowView
		want string
	}{
		{flow("open", "", "completed", "completed", "completed"), "state=completed (flow record: open) "},
		{flow("open", "running", "completed", "completed"), "state=completed (flow record: open) "},
		{flow("open", "", "completed", "skipped", "failed"), "state=failed (flow record: open) "},
		{flow("open", "running", "completed", "active"), "state=running (flow record: open) "},
		{flow("open", "", "completed", "waiting"), "state=open "},
		{flow("cancelled", "", "completed", "cancelled"), "state=cancelled "},
	} {
		var b bytes.Buffer
		printFlow(&b, c.f)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("want %q in:\n%s", c.want, b.String())
		}
	}
}

// TestSignalWithoutPayload: `fabric executions signal` without --payload
// delivers a signal with no payload (the resumed worker reads a nil
// ResumeSignal.Payload), not "{}".
func TestSignalWithoutPayload(t *testing.T) {
	const token = "signal-token"
	addr, s := consoleHost(t, token)
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "executions", "signal", string(s.Suspended), "approve", "--admin", addr, "--admin-token-file", tokFile)
	m := regexp.MustCompile(`signal_id=(\S+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("signal: exit %d\n%s%s", code, out, errOut)
	}
	ctx := valkeytest.Context(t, time.Minute)
	raw := s.VC.Raw()
	pk := model.KeysOn(s.Suspended.Partition())
	if n, err := raw.Do(ctx, raw.B().Exists().Key(pk.Signal(m[1])).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("signal %s not recorded: %d %v", m[1], n, err)
	}
	if n, err := raw.Do(ctx, raw.B().Exists().Key(pk.SignalPayload(m[1])).Build()).AsInt64(); err != nil || n != 0 {
		v, _ := raw.Do(ctx, raw.B().Get().Key(pk.SignalPayload(m[1])).Build()).ToString()
		t.Fatalf("a signal without --payload stored payload %q (%v)", v, err)
	}
}
