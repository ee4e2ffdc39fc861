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
)

func testKey(t *testing.T) (ed25519.PrivateKey, ed25519.PublicKey) {
	t.Helper()
	privPEM, pubPEM, err := host.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := host.ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := host.ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// TestRequireSignedRefusesUnsignedAndTampered: with RequireSigned an
// unsigned file is refused with the reason; signed by a trusted key it
// runs (the .sig written beside it reloads it and is never itself a bad
// plugin); a copy with one byte changed is refused as changed after
// signing while the signed version keeps running.
func TestRequireSignedRefusesUnsignedAndTampered(t *testing.T) {
	t.Parallel()
	priv, pub := testKey(t)
	b := setup(t, setupOpts{fixtures: []string{"healthy"}, noStart: true})
	h, err := host.New(host.Config{PluginDir: b.dir, CacheDir: cacheDir, Logger: valkeytest.Logger(), Policy: fixturePolicy(t),
		TrustedKeys: []ed25519.PublicKey{pub}, RequireSigned: true, Debounce: 50 * time.Millisecond, TestSignals: b.sig,
		Now: func(context.Context) (int64, error) { return 1, nil }})
	if err != nil {
		t.Fatal(err)
	}
	b.host = h
	b.start(t)
	path := filepath.Join(b.dir, "healthy.wasm")

	fs := b.sig.Rejected.WaitOrTimeout(t)
	if !strings.Contains(fs.Error, "not signed") || !strings.Contains(fs.Error, "healthy.wasm.sig") {
		t.Fatalf("unsigned: %q", fs.Error)
	}
	if _, ok := h.Plugin("healthy"); ok {
		t.Fatal("the unsigned plugin loaded")
	}

	if _, err := host.SignPlugin(context.Background(), path, priv, host.InspectConfig{CacheDir: cacheDir}); err != nil {
		t.Fatal(err)
	}
	st := b.sig.Loaded.WaitOrTimeout(t)
	if st.Name != "healthy" || st.Signer != host.KeyID(pub) {
		t.Fatalf("loaded %s signed by %q; want healthy by %s", st.Name, st.Signer, host.KeyID(pub))
	}
	valkeytest.Eventually(t, 60*time.Second, "the signed plugin runs", func() bool { return b.callsOf("healthy") > 0 })
	for _, f := range h.Files() {
		if strings.HasSuffix(f.Path, host.SignatureSuffix) {
			t.Fatalf("the signature file is listed as a plugin file: %+v", f)
		}
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 0x01 // one byte, in the last section
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	fs = b.sig.Rejected.WaitOrTimeout(t)
	if !strings.Contains(fs.Error, "changed after signing") {
		t.Fatalf("tampered: %q; want changed after signing", fs.Error)
	}
	if st, _ := h.Plugin("healthy"); st.State != host.StateRunning || st.Signer != host.KeyID(pub) {
		t.Fatalf("after the tampered write healthy is %s signed by %q; want the signed version running", st.State, st.Signer)
	}
}

// TestVerifyPlugin: a signature verifies against its key only; another
// trusted key set refuses it with the signer named.
func TestVerifyPlugin(t *testing.T) {
	t.Parallel()
	priv, pub := testKey(t)
	_, other := testKey(t)
	path := filepath.Join(t.TempDir(), "healthy.wasm")
	copyFile(t, fixture(t, "healthy"), path)
	cfg := host.InspectConfig{CacheDir: cacheDir}
	if _, err := host.VerifyPlugin(context.Background(), path, []ed25519.PublicKey{pub}, cfg); !errors.Is(err, host.ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
	if _, err := host.SignPlugin(context.Background(), path, priv, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := host.VerifyPlugin(context.Background(), path, []ed25519.PublicKey{pub}, cfg)
	if err != nil || s == nil || s.Key != host.KeyID(pub) || s.Manifest.Name != "healthy" {
		t.Fatalf("verify: %+v, %v", s, err)
	}
	if _, err := host.VerifyPlugin(context.Background(), path, []ed25519.PublicKey{other}, cfg); !errors.Is(err, host.ErrBadSignature) || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("untrusted key: %v", err)
	}
	if err := os.WriteFile(path+host.SignatureSuffix, []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := host.VerifyPlugin(context.Background(), path, []ed25519.PublicKey{pub}, cfg); !errors.Is(err, host.ErrBadSignature) {
		t.Fatalf("garbage signature: %v", err)
	}
}
