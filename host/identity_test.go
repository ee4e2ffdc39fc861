package host_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// squatKey is the key the squatter fixture writes on quota partition i
// when it runs with quota_reconciler's grant.
func squatKey(i uint16) string {
	return "ff:quota:" + model.Partition{Family: model.FamilyQuota, Index: i}.Tag() + ":squatted_by_quota_reconciler"
}

// waitRejected waits for a rejection of the file named base with reason
// (skipping the host's other rejections).
func waitRejected(t *testing.T, b *testBundle, base, reason string) host.FileStatus {
	t.Helper()
	for {
		fs := b.sig.Rejected.WaitOrTimeout(t)
		if filepath.Base(fs.Path) == base && fs.Reason == reason {
			return fs
		}
	}
}

// TestImpostorFileNameRefused drops squatter.wasm, whose manifest
// declares the stock quota_reconciler, beside the running stock plugin:
// it is refused at load (a file must be named after its plugin) naming
// both, the stock version keeps running and nothing the squatter would
// write appears; deleting the impostor leaves quota_reconciler running.
func TestImpostorFileNameRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"quota_reconciler"}, store: true,
		plugins: map[string]host.PluginConfig{"quota_reconciler": {Interval: 100 * time.Millisecond}}})
	stock := waitLoaded(t, b, "quota_reconciler")
	copyFile(t, fixture(t, "squatter"), filepath.Join(b.dir, "squatter.wasm"))
	fs := waitRejected(t, b, "squatter.wasm", host.RejectNameMismatch)
	if !strings.Contains(fs.Error, "squatter.wasm declares plugin quota_reconciler") || !strings.Contains(fs.Error, "quota_reconciler.wasm") {
		t.Fatalf("rejection %q: want it to name the file and the plugin it claims", fs.Error)
	}
	waitCycles(t, b, "quota_reconciler", 2)
	if st, _ := b.host.Plugin("quota_reconciler"); st.SHA256 != stock.SHA256 || st.Version != stock.Version {
		t.Fatalf("quota_reconciler is %s %s, want the stock %s %s", st.Version, st.SHA256, stock.Version, stock.SHA256)
	}
	raw := b.backend(t).Raw()
	for i := uint16(0); i < 2; i++ {
		n, err := raw.Do(context.Background(), raw.B().Exists().Key(squatKey(i)).Build()).AsInt64()
		if err != nil || n != 0 {
			t.Fatalf("%s: exists %d, %v: the impostor wrote", squatKey(i), n, err)
		}
	}
	if err := os.Remove(filepath.Join(b.dir, "squatter.wasm")); err != nil {
		t.Fatal(err)
	}
	valkeytest.Eventually(t, 20*time.Second, "the impostor's file forgotten", func() bool {
		for _, f := range b.host.Files() {
			if filepath.Base(f.Path) == "squatter.wasm" {
				return false
			}
		}
		return true
	})
	if st, ok := b.host.Plugin("quota_reconciler"); !ok || st.SHA256 != stock.SHA256 {
		t.Fatalf("after deleting the impostor: quota_reconciler %v %+v", ok, st)
	}
}

// TestStockGrantBoundToTrustedSignature: under the stock grants bound
// to a trusted signature (Policy.BindStock, as `fabric run` has them) the
// squatter dropped as quota_reconciler.wasm, unsigned, gets only the
// default grant and is refused, the binding named; signed by the
// operator's key it is the operator's quota_reconciler and loads.
func TestStockGrantBoundToTrustedSignature(t *testing.T) {
	t.Parallel()
	priv, pub := testKey(t)
	b := setup(t, setupOpts{noStart: true})
	policy := host.StockPolicy().BindStock()
	h, err := host.New(host.Config{PluginDir: b.dir, CacheDir: cacheDir, Logger: valkeytest.Logger(), Policy: &policy,
		TrustedKeys: []ed25519.PublicKey{pub}, Debounce: 50 * time.Millisecond, TestSignals: b.sig,
		Now: func(context.Context) (int64, error) { return 1, nil }})
	if err != nil {
		t.Fatal(err)
	}
	b.host = h
	b.start(t)
	path := filepath.Join(b.dir, "quota_reconciler.wasm")
	copyFile(t, fixture(t, "squatter"), path)
	fs := waitRejected(t, b, "quota_reconciler.wasm", host.RejectNotGranted)
	if !strings.Contains(fs.Error, "write ff:quota:* not granted") || !strings.Contains(fs.Error, "a signature by a trusted key; this one is unsigned") {
		t.Fatalf("rejection %q: want the stock grant withheld for want of a trusted signature", fs.Error)
	}
	if _, ok := h.Plugin("quota_reconciler"); ok {
		t.Fatal("the unsigned impostor runs as quota_reconciler")
	}
	if _, err := host.SignPlugin(context.Background(), path, priv, host.InspectConfig{CacheDir: cacheDir}); err != nil {
		t.Fatal(err)
	}
	st := waitLoaded(t, b, "quota_reconciler")
	if st.Signer != host.KeyID(pub) || st.Version != "9.9.9" {
		t.Fatalf("signed by the operator: %+v", st)
	}
}

// TestSignedDowngradeRefused: under require_signed a signed v1 copied
// over the running signed v2 is refused as a downgrade naming both
// versions, and v2 keeps running; the operator's explicit Rollback
// admits that file; a v2 written again is an upgrade.
func TestSignedDowngradeRefused(t *testing.T) {
	t.Parallel()
	priv, pub := testKey(t)
	ctx := context.Background()
	signed := t.TempDir()
	for _, f := range []string{"swap_v1", "swap_v2"} {
		p := filepath.Join(signed, f+".wasm")
		copyFile(t, fixture(t, f), p)
		if _, err := host.SignPlugin(ctx, p, priv, host.InspectConfig{CacheDir: cacheDir}); err != nil {
			t.Fatal(err)
		}
	}
	// deploy writes a signed version as swapper.wasm, its signature first.
	b := setup(t, setupOpts{noStart: true})
	path := filepath.Join(b.dir, "swapper.wasm")
	deploy := func(f string) {
		copyFile(t, filepath.Join(signed, f+".wasm.sig"), path+".sig")
		copyFile(t, filepath.Join(signed, f+".wasm"), path)
	}
	deploy("swap_v2")
	h, err := host.New(host.Config{PluginDir: b.dir, CacheDir: cacheDir, Logger: valkeytest.Logger(), Policy: fixturePolicy(t),
		TrustedKeys: []ed25519.PublicKey{pub}, RequireSigned: true, Debounce: 50 * time.Millisecond, TestSignals: b.sig,
		Now: func(context.Context) (int64, error) { return 1, nil }})
	if err != nil {
		t.Fatal(err)
	}
	b.host = h
	b.start(t)
	if st := waitLoaded(t, b, "swapper"); st.Version != "2.0.0" {
		t.Fatalf("loaded %+v", st)
	}

	deploy("swap_v1")
	fs := waitRejected(t, b, "swapper.wasm", host.RejectDowngrade)
	if !strings.Contains(fs.Error, "swapper 1.0.0") || !strings.Contains(fs.Error, "has run 2.0.0") {
		t.Fatalf("rejection %q: want it to name both versions", fs.Error)
	}
	if st, _ := h.Plugin("swapper"); st.Version != "2.0.0" {
		t.Fatalf("after the refused downgrade swapper is %s, want 2.0.0", st.Version)
	}

	v, err := h.Rollback(ctx, "swapper")
	if err != nil || v != "1.0.0" {
		t.Fatalf("Rollback = %q, %v; want 1.0.0 admitted", v, err)
	}
	if st, _ := h.Plugin("swapper"); st.Version != "1.0.0" {
		t.Fatalf("after the rollback swapper is %s", st.Version)
	}
	if _, err := h.Rollback(ctx, "swapper"); !errors.Is(err, host.ErrNoShadow) {
		t.Fatalf("a second Rollback = %v, want ErrNoShadow (nothing left to admit)", err)
	}

	deploy("swap_v2")
	st := waitLoaded(t, b, "swapper")
	for st.Version != "2.0.0" {
		st = waitLoaded(t, b, "swapper")
	}
}

// TestGrantBinding checks Policy.ForFile: a grant bound by sha256 or
// signer applies only to the files it names, else the default grant
// alone with why; an unbound grant applies to any file.
func TestGrantBinding(t *testing.T) {
	const digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	p := host.Policy{Default: host.Grant{Read: []string{"ff:idx:lanes"}}, Plugins: map[string]host.Grant{
		"free":   {Read: []string{"ff:exec:*:core"}},
		"pinned": {Read: []string{"ff:exec:*:core"}, SHA256: []string{digest}},
		"keyed":  {Read: []string{"ff:exec:*:core"}, Signers: []string{"00112233aabbccdd"}},
		"any":    {Read: []string{"ff:exec:*:core"}, Signers: []string{host.AnySigner}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, digest, signer string
		granted              bool
		why                  string
	}{
		{"free", "ff", "", true, ""},
		{"pinned", digest, "", true, ""},
		{"pinned", "ff", "00112233aabbccdd", false, "applies only to a file with sha256 " + digest + "; this one is signed by key 00112233aabbccdd, sha256 ff"},
		{"keyed", "ff", "00112233aabbccdd", true, ""},
		{"keyed", "ff", "ffffffffffffffff", false, "a signature by trusted key 00112233aabbccdd"},
		{"keyed", "ff", "", false, "this one is unsigned"},
		{"any", "ff", "ffffffffffffffff", true, ""},
		{"any", "ff", "", false, "a signature by a trusted key; this one is unsigned"},
	} {
		g, why := p.ForFile(tc.name, tc.digest, tc.signer)
		got := len(g.Read) == 2
		if got != tc.granted || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s %s %q: read %v, withheld %q; want granted %v, %q", tc.name, tc.digest, tc.signer, g.Read, why, tc.granted, tc.why)
		}
		if !tc.granted && (len(g.Read) != 1 || g.Read[0] != "ff:idx:lanes") {
			t.Errorf("%s withheld: read %v, want the default grant's alone", tc.name, g.Read)
		}
	}
	for _, bad := range []host.Grant{{SHA256: []string{"abc"}}, {Signers: []string{"nope"}}} {
		q := host.Policy{Plugins: map[string]host.Grant{"x": bad}}
		if err := q.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
	bound := host.StockPolicy().BindStock()
	if g := bound.Plugins["quota_reconciler"]; len(g.Signers) != 1 || g.Signers[0] != host.AnySigner {
		t.Fatalf("BindStock: quota_reconciler signers %v", g.Signers)
	}
}

// TestSignedDowngradeRefusedAfterRestart: with a VersionsFile the host
// remembers the newest version it ran across a restart, so a signed v1
// written over v2 while no host runs is refused when the next host
// starts; a versions file that is not one stops New, naming it.
func TestSignedDowngradeRefusedAfterRestart(t *testing.T) {
	t.Parallel()
	priv, pub := testKey(t)
	ctx := context.Background()
	signed := t.TempDir()
	for _, f := range []string{"swap_v1", "swap_v2"} {
		p := filepath.Join(signed, f+".wasm")
		copyFile(t, fixture(t, f), p)
		if _, err := host.SignPlugin(ctx, p, priv, host.InspectConfig{CacheDir: cacheDir}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	versions := filepath.Join(t.TempDir(), "state", "versions.json")
	path := filepath.Join(dir, "swapper.wasm")
	deploy := func(f string) {
		copyFile(t, filepath.Join(signed, f+".wasm.sig"), path+".sig")
		copyFile(t, filepath.Join(signed, f+".wasm"), path)
	}
	cfg := func(sig *host.TestSignals) host.Config {
		return host.Config{PluginDir: dir, CacheDir: cacheDir, VersionsFile: versions, Logger: valkeytest.Logger(), Policy: fixturePolicy(t),
			TrustedKeys: []ed25519.PublicKey{pub}, RequireSigned: true, Debounce: 50 * time.Millisecond, TestSignals: sig,
			Now: func(context.Context) (int64, error) { return 1, nil }}
	}
	start := func() *testBundle {
		sig := &host.TestSignals{}
		sig.Init()
		h, err := host.New(cfg(sig))
		if err != nil {
			t.Fatal(err)
		}
		b := &testBundle{host: h, dir: dir, sig: sig}
		b.start(t)
		return b
	}

	deploy("swap_v2")
	first := start()
	if st := waitLoaded(t, first, "swapper"); st.Version != "2.0.0" {
		t.Fatalf("loaded %+v", st)
	}
	first.host.Stop()
	first.host.Close(ctx)
	if b, err := os.ReadFile(versions); err != nil || !strings.Contains(string(b), `"swapper": "2.0.0"`) {
		t.Fatalf("versions file after the first host: %q, %v", b, err)
	}

	deploy("swap_v1") // while no host runs
	second := start()
	fs := waitRejected(t, second, "swapper.wasm", host.RejectDowngrade)
	if !strings.Contains(fs.Error, "has run 2.0.0") {
		t.Fatalf("rejection %q: want it to name the version run before the restart", fs.Error)
	}
	if _, ok := second.host.Plugin("swapper"); ok {
		t.Fatal("the older signed file runs after a restart")
	}
	second.host.Stop()
	second.host.Close(ctx)

	if err := os.WriteFile(versions, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := host.New(cfg(nil)); err == nil || !strings.Contains(err.Error(), versions) {
		t.Fatalf("New with a corrupt versions file = %v, want an error naming it", err)
	}
}
