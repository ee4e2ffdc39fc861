package host

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fabric-host/fabric/abi"
)

// Signature errors. Each refusal also names the file and the reason.
var (
	// ErrUnsigned: RequireSigned and the file has no NAME.wasm.sig.
	ErrUnsigned = errors.New("host: plugin is not signed")
	// ErrBadSignature: the signature does not hold (the file or its
	// manifest changed after signing, a malformed .sig) or its key is not
	// trusted while RequireSigned.
	ErrBadSignature = errors.New("host: plugin signature does not verify")
)

// SignatureSuffix is appended to a plugin file's name for its detached
// signature: delayed_promoter.wasm.sig.
const SignatureSuffix = ".sig"

// signatureFormat names the signed message's layout; it starts the message
// so a signature made for anything else never verifies as a plugin's.
const signatureFormat = "fabric-plugin-signature/1"

// maxSignatureBytes bounds a .sig file read by the host.
const maxSignatureBytes = 64 << 10

// Signature is a detached plugin signature (NAME.wasm.sig, JSON): ed25519
// over signatureFormat, the module's sha256 and its manifest in binary
// form, so neither the code nor what the plugin requests can change
// without the signature failing.
type Signature struct {
	Format string `json:"format"`
	// Key is the signer's KeyID; PublicKey its ed25519 public key. The
	// host trusts a signature only when PublicKey is one of its trusted
	// keys.
	Key       string `json:"key"`
	PublicKey []byte `json:"public_key"`
	// SHA256 is the hex digest of the signed module.
	SHA256 string `json:"sha256"`
	// Manifest is the signed manifest, as the plugin declares it (defaults
	// applied).
	Manifest abi.Manifest `json:"manifest"`
	// Sig is the ed25519 signature of the message.
	Sig []byte `json:"signature"`
}

func signedMessage(digest string, m abi.Manifest) ([]byte, error) {
	mb, err := m.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("host: manifest: %w", err)
	}
	msg := make([]byte, 0, len(signatureFormat)+len(digest)+len(mb)+2)
	msg = append(msg, signatureFormat+"\n"+digest+"\n"...)
	return append(msg, mb...), nil
}

// KeyID names a public key: the first 16 hex digits of its sha256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateKey makes an ed25519 signing key and returns it and its public
// key as PEM (PKCS #8 "PRIVATE KEY", PKIX "PUBLIC KEY").
func GenerateKey(r io.Reader) (private, public []byte, err error) {
	if r == nil {
		r = rand.Reader
	}
	pub, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, nil, fmt.Errorf("host: generate key: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("host: encode private key: %w", err)
	}
	pb, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("host: encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pb}), nil
}

// ParsePrivateKey reads a PEM ed25519 private key (GenerateKey's).
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("host: not a PEM \"PRIVATE KEY\"")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("host: private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("host: private key is %T, want ed25519", k)
	}
	return priv, nil
}

// ParsePublicKey reads a PEM ed25519 public key (GenerateKey's).
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("host: not a PEM \"PUBLIC KEY\"")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("host: public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("host: public key is %T, want ed25519", k)
	}
	return pub, nil
}

// ReadPublicKeys reads PEM public key files.
func ReadPublicKeys(paths ...string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("host: trusted key: %w", err)
		}
		k, err := ParsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("host: trusted key %s: %w", p, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// SignPlugin validates the plugin file at path as Inspect does and writes
// its detached signature to path+SignatureSuffix.
func SignPlugin(ctx context.Context, path string, key ed25519.PrivateKey, cfg InspectConfig) (*Signature, error) {
	cfg.Policy = nil
	in, err := Inspect(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	msg, err := signedMessage(in.SHA256, in.Manifest)
	if err != nil {
		return nil, err
	}
	pub := key.Public().(ed25519.PublicKey)
	s := &Signature{Format: signatureFormat, Key: KeyID(pub), PublicKey: pub, SHA256: in.SHA256, Manifest: in.Manifest, Sig: ed25519.Sign(key, msg)}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("host: encode signature: %w", err)
	}
	if err := os.WriteFile(path+SignatureSuffix, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("host: write signature: %w", err)
	}
	return s, nil
}

// VerifyPlugin checks path's signature against keys as a host with
// RequireSigned would, and returns it.
func VerifyPlugin(ctx context.Context, path string, keys []ed25519.PublicKey, cfg InspectConfig) (*Signature, error) {
	cfg.TrustedKeys, cfg.RequireSigned = keys, true
	in, err := Inspect(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	return in.Signature, nil
}

// trustConfig is how a loader checks signatures.
type trustConfig struct {
	keys    []ed25519.PublicKey
	require bool
}

func newTrust(keys []ed25519.PublicKey, require bool) *trustConfig {
	if len(keys) == 0 && !require {
		return nil
	}
	return &trustConfig{keys: keys, require: require}
}

// verifiedSig is a signature that held over a module digest; matches then
// checks the manifest the module declares. Nil: unsigned (allowed).
type verifiedSig struct{ s *Signature }

func (v *verifiedSig) signature() *Signature {
	if v == nil {
		return nil
	}
	return v.s
}

// verify reads path's .sig and checks it against the module's digest. A
// missing signature is an error only when required; a present one signed
// by a trusted key must hold; one by an untrusted key is ignored unless
// required.
func (t *trustConfig) verify(path, digest string) (*verifiedSig, error) {
	if t == nil {
		return nil, nil
	}
	sigPath := path + SignatureSuffix
	// Read as a plugin file is: a FIFO or device named *.sig must not
	// hold the loader (readRegularFile).
	b, err := readRegularFile(sigPath, maxSignatureBytes)
	if errors.Is(err, os.ErrNotExist) {
		if t.require {
			return nil, fmt.Errorf("%w: %s has no %s (require_signed)", ErrUnsigned, path, sigPath)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	var s Signature
	if err := json.Unmarshal(b, &s); err != nil || s.Format != signatureFormat {
		return nil, fmt.Errorf("%w: %s is not a %s file", ErrBadSignature, sigPath, signatureFormat)
	}
	trusted := false
	for _, k := range t.keys {
		if bytes.Equal(k, s.PublicKey) {
			trusted = true
		}
	}
	if !trusted {
		if t.require {
			return nil, fmt.Errorf("%w: %s is signed by key %s, which is not trusted", ErrBadSignature, path, KeyID(s.PublicKey))
		}
		return nil, nil
	}
	if s.SHA256 != digest {
		return nil, fmt.Errorf("%w: %s: signed sha256 %s, file is %s (changed after signing)", ErrBadSignature, path, s.SHA256, digest)
	}
	msg, err := signedMessage(s.SHA256, s.Manifest)
	if err != nil || !ed25519.Verify(ed25519.PublicKey(s.PublicKey), msg, s.Sig) {
		return nil, fmt.Errorf("%w: %s: the ed25519 signature by key %s does not hold", ErrBadSignature, path, KeyID(s.PublicKey))
	}
	s.Key = KeyID(s.PublicKey)
	return &verifiedSig{s: &s}, nil
}

// matches checks that the module declares the signed manifest.
func (v *verifiedSig) matches(m abi.Manifest) error {
	if v == nil {
		return nil
	}
	a, errA := v.s.Manifest.MarshalBinary()
	b, errB := m.MarshalBinary()
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		return fmt.Errorf("%w: %s declares a manifest other than the one signed", ErrBadSignature, m.Name)
	}
	return nil
}
