package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPluginsValidateGrant: a plugin requesting beyond the built-in grants
// is refused by validate with the exact difference (and the grant that
// would admit it), inspect prints every requested and granted field in
// text, and with a fabric.toml granting it validate accepts it.
func TestPluginsValidateGrant(t *testing.T) {
	t.Parallel()
	cache := defaultCacheDir()
	fx := fixture(t, "selfgrant")
	diff := "fcall ff_cancel_execution not granted; write ff:* not granted; cross_partition not granted"
	code, out, errOut := run(t, "plugins", "validate", "--cache-dir", cache, fx)
	if code != 1 || !strings.Contains(errOut, "selfgrant requests more than it is granted: "+diff) || !strings.Contains(out, `write = ["ff:*"]`) {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "plugins", "inspect", "--cache-dir", cache, fx)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	for k, want := range map[string]string{
		"capabilities.fcall": "ff_cancel_execution -", "capabilities.write": "ff:* -", "capabilities.read": "- -",
		"capabilities.sql": "- -", "capabilities.cross_partition": "true false", "max_pages": "1024 1024", "timeout_ms": "5000 5000",
		"max_output_bytes": "- 65536", "commands_per_second": "- 1000000", "commands_per_sweep": "- not limited", "verdict": "REFUSED: " + diff,
	} {
		if rows[k] != want {
			t.Fatalf("inspect %s = %q, want %q:\n%s", k, rows[k], want, out)
		}
	}

	cfg := filepath.Join(t.TempDir(), "fabric.toml")
	grant := "[plugins.selfgrant.grant]\nfcall = [\"ff_cancel_execution\"]\nwrite = [\"ff:*\"]\ncross_partition = true\n"
	if err := os.WriteFile(cfg, []byte(grant), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "plugins", "validate", "--cache-dir", cache, "--config", cfg, fx)
	if code != 0 || !strings.Contains(out, "ok: selfgrant 1.0.0") {
		t.Fatalf("validate --config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The grant validate prints, pasted into fabric.toml as it is, admits
	// the plugin (it printed capabilities.fcall, a key the file refuses).
	// It is on stdout, so `validate F >> fabric.toml` keeps it whole.
	_, printed, refused := run(t, "plugins", "validate", "--cache-dir", cache, fx)
	if !strings.HasPrefix(printed, "# the grant that would admit it") || !strings.Contains(printed, "\n[plugins.selfgrant.grant]") ||
		strings.Contains(refused, "[plugins.selfgrant.grant]") {
		t.Fatalf("validate printed no grant on stdout: stdout %q, stderr %q", printed, refused)
	}
	if err := os.WriteFile(cfg, []byte(printed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "plugins", "validate", "--cache-dir", cache, "--config", cfg, fx)
	if code != 0 || !strings.Contains(out, "ok: selfgrant 1.0.0") {
		t.Fatalf("validate with the printed grant:\n%s\nexit %d, stdout %q, stderr %q", printed, code, out, errOut)
	}
	if err := os.WriteFile(cfg, []byte("[plugins.selfgrant.grant]\nfcal = [\"ff_x\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "plugins", "validate", "--cache-dir", cache, "--config", cfg, fx)
	if code != 2 || !strings.Contains(errOut, "unknown key plugins.selfgrant.grant.fcal") {
		t.Fatalf("validate with a misspelt grant key: exit %d, stderr %q", code, errOut)
	}
}

// TestPluginsSignVerify: keygen, sign and verify round trip; an unsigned
// file, a one-byte-tampered file and another key are refused with the
// reason.
func TestPluginsSignVerify(t *testing.T) {
	t.Parallel()
	cache := defaultCacheDir()
	dir := t.TempDir()
	prefix := filepath.Join(dir, "k")
	if code, out, errOut := run(t, "plugins", "keygen", "--out", prefix); code != 0 || !strings.Contains(out, "key ") {
		t.Fatalf("keygen: exit %d, %q %q", code, out, errOut)
	}
	if code, _, _ := run(t, "plugins", "keygen", "--out", prefix); code != 1 {
		t.Fatalf("keygen over an existing key: exit %d, want 1", code)
	}
	if st, err := os.Stat(prefix + ".key"); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", st, err)
	}
	plug := filepath.Join(dir, "healthy.wasm")
	b, err := os.ReadFile(fixture(t, "healthy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plug, b, 0o644); err != nil {
		t.Fatal(err)
	}
	verify := func(keys string) (int, string, string) {
		return run(t, "plugins", "verify", "--cache-dir", cache, "--trusted-keys", keys, plug)
	}
	if code, _, errOut := verify(prefix + ".pub"); code != 1 || !strings.Contains(errOut, "not signed") {
		t.Fatalf("verify unsigned: exit %d, %q", code, errOut)
	}
	inspectSig := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(t, append(append([]string{"plugins", "inspect", "--cache-dir", cache}, args...), plug)...)
		if code != 0 {
			t.Fatalf("inspect %v: exit %d: %s", args, code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == "signature" {
				return strings.TrimSpace(strings.TrimPrefix(line, "signature"))
			}
		}
		t.Fatalf("inspect %v printed no signature row:\n%s", args, out)
		return ""
	}
	if got := inspectSig(); got != "unsigned (no healthy.wasm.sig)" {
		t.Fatalf("inspect unsigned: signature %q", got)
	}
	if code, out, errOut := run(t, "plugins", "sign", "--cache-dir", cache, "--key", prefix+".key", plug); code != 0 || !strings.Contains(out, "signed "+plug+".sig") {
		t.Fatalf("sign: exit %d, %q %q", code, out, errOut)
	}
	if got := inspectSig(); !strings.HasPrefix(got, "not checked: healthy.wasm.sig is there") {
		t.Fatalf("inspect signed, no keys: signature %q", got)
	}
	if got := inspectSig("--trusted-keys", prefix+".pub"); !strings.HasPrefix(got, "key ") {
		t.Fatalf("inspect signed, its key: signature %q", got)
	}
	if code, out, errOut := verify(prefix + ".pub"); code != 0 || !strings.Contains(out, "ok: "+plug+" healthy 1.0.0") {
		t.Fatalf("verify signed: exit %d, %q %q", code, out, errOut)
	}
	other := filepath.Join(dir, "other")
	run(t, "plugins", "keygen", "--out", other)
	if code, _, errOut := verify(other + ".pub"); code != 1 || !strings.Contains(errOut, "not trusted") {
		t.Fatalf("verify with another key: exit %d, %q", code, errOut)
	}
	if got := inspectSig("--trusted-keys", other+".pub"); !strings.HasPrefix(got, "not by a trusted key") {
		t.Fatalf("inspect signed, another key: signature %q", got)
	}
	b[len(b)-1] ^= 0x01
	if err := os.WriteFile(plug, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := verify(prefix + ".pub"); code != 1 || !strings.Contains(errOut, "changed after signing") {
		t.Fatalf("verify tampered: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run(t, "plugins", "validate", "--cache-dir", cache, "--require-signed", fixture(t, "healthy")); code != 2 || !strings.Contains(errOut, "--require-signed needs --trusted-keys") {
		t.Fatalf("--require-signed without keys: exit %d, %q", code, errOut)
	}
}

// TestRunRequireSigned runs `fabric run` with a fabric.toml naming a
// trusted key and require_signed: the signed delayed_promoter runs and
// promotes, the unsigned selfgrant beside it is refused with the reason.
func TestRunRequireSigned(t *testing.T) {
	t.Parallel()
	cache := defaultCacheDir()
	dir, plugins := t.TempDir(), t.TempDir()
	for src, dst := range map[string]string{
		filepath.Join("..", "..", "bin", "plugins", "delayed_promoter.wasm"): filepath.Join(plugins, "delayed_promoter.wasm"),
		fixture(t, "selfgrant"): filepath.Join(plugins, "selfgrant.wasm"),
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("plugin set not built (run `make plugins`): %v", err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := run(t, "plugins", "keygen", "--out", filepath.Join(dir, "ops")); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := run(t, "plugins", "sign", "--cache-dir", cache, "--key", filepath.Join(dir, "ops.key"), filepath.Join(plugins, "delayed_promoter.wasm")); code != 0 {
		t.Fatal(errOut)
	}
	cfg := filepath.Join(dir, "fabric.toml")
	if err := os.WriteFile(cfg, []byte("trusted_keys = [\"ops.pub\"]\nrequire_signed = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "run", "--config", cfg, "--plugins", plugins, "--duration", "1s", "--rate", "40",
		"--mix", "immediate=1,delayed=1", "--admin-addr", "127.0.0.1:0", "--partitions", "flow=16,budget=4,quota=4")
	if code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if m := regexp.MustCompile(`plugin delayed_promoter \S+: .* acted (\d+), errors 0`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Fatalf("the signed delayed_promoter did not promote anything:\n%s", out)
	}
	if all := out + errOut; !strings.Contains(all, "selfgrant.wasm has no") || !strings.Contains(all, "not signed") {
		t.Fatalf("the unsigned selfgrant was not refused with its reason:\nstdout:\n%s\nstderr:\n%s", out, errOut)
	}
}
