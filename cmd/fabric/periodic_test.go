package main

import (
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestPeriodicCLI: add, list, remove against a real server; bad input
// exits 2 and a missing name exits 1.
func TestPeriodicCLI(t *testing.T) {
	t.Parallel()
	url := valkeytest.NewServer(t).URL()
	code, out, errOut := runCmd(t, "periodic", "add", "--valkey-url", url, "--every", "90s", "--kind", "report",
		"--lane", "reports", "--tag", "team=ops", "--max-retries", "2", "nightly")
	if code != 0 || !strings.Contains(out, "periodic nightly: report on lane reports, first tick") {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "periodic", "add", "--valkey-url", url, "--cron", "0 3 * * *", "--kind", "k", "cron-one"); code != 0 {
		t.Fatalf("add cron: %d %q", code, errOut)
	}
	code, out, _ = runCmd(t, "periodic", "list", "--valkey-url", url)
	if code != 0 || !strings.Contains(out, "every 1m30s") || !strings.Contains(out, "0 3 * * *") || strings.Index(out, "cron-one") > strings.Index(out, "nightly") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	for name, args := range map[string][]string{
		"NoTiming":    {"--kind", "k", "x"},
		"BadCron":     {"--cron", "whenever", "--kind", "k", "x"},
		"NoKind":      {"--every", "1m", "x"},
		"BadName":     {"--every", "1m", "--kind", "k", "a b"},
		"BadTag":      {"--every", "1m", "--kind", "k", "--tag", "novalue", "x"},
		"NoName":      {"--every", "1m", "--kind", "k"},
		"BadLane":     {"--every", "1m", "--kind", "k", "--lane", "", "x"},
		"NoValkeyURL": nil,
	} {
		full := append([]string{"periodic", "add"}, args...)
		if name != "NoValkeyURL" {
			full = append([]string{"periodic", "add", "--valkey-url", url}, args...)
		} else {
			full = append(full, "--every", "1m", "--kind", "k", "x")
		}
		if code, _, _ := runCmd(t, full...); code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
	}
	if code, out, _ := runCmd(t, "periodic", "remove", "--valkey-url", url, "nightly"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("remove: %d %q", code, out)
	}
	if code, _, errOut := runCmd(t, "periodic", "remove", "--valkey-url", url, "nightly"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("second remove: %d %q", code, errOut)
	}
	code, out, _ = runCmd(t, "periodic", "list", "--valkey-url", url, "--json")
	if code != 0 || strings.Contains(out, "nightly") || !strings.Contains(out, `"Name": "cron-one"`) {
		t.Fatalf("list --json: %d\n%s", code, out)
	}
}

// TestPeriodicCLIOnPostgres: the same verbs on a Postgres deployment
// (pg_periodic fires its schedules); both URLs or neither is a usage
// error, and an unmigrated database names fabric migrate.
func TestPeriodicCLIOnPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	code, out, errOut := runCmd(t, "periodic", "add", "--postgres-url", url, "--every", "90s", "--kind", "report", "--lane", "reports", "nightly")
	if code != 0 || !strings.Contains(out, "periodic nightly: report on lane reports, first tick") {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCmd(t, "periodic", "list", "--postgres-url", url)
	if code != 0 || !strings.Contains(out, "nightly") || !strings.Contains(out, "every 1m30s") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	if code, out, _ := runCmd(t, "periodic", "remove", "--postgres-url", url, "nightly"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("remove: %d %q", code, out)
	}
	if code, _, errOut := runCmd(t, "periodic", "remove", "--postgres-url", url, "nightly"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("second remove: %d %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "periodic", "list", "--postgres-url", url, "--valkey-url", "redis://127.0.0.1:1"); code != 2 || !strings.Contains(errOut, "one of --valkey-url and --postgres-url") {
		t.Fatalf("both URLs: %d %q", code, errOut)
	}
	bare := pgtest.NewDatabase(t, false)
	if code, _, errOut := runCmd(t, "periodic", "list", "--postgres-url", bare); code != 1 || !strings.Contains(errOut, "fabric migrate") {
		t.Fatalf("unmigrated: %d %q", code, errOut)
	}
}
