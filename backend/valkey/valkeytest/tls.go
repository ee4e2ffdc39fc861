package valkeytest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
)

// Certs are PEM files of a throwaway PKI made for one test: a CA, a
// server certificate for 127.0.0.1 and localhost, and a client
// certificate, each signed by the CA.
type Certs struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts writes a fresh CA, server and client certificate (ECDSA P-256,
// valid for an hour) into a temporary directory of tb.
func NewCerts(tb testing.TB) *Certs {
	tb.Helper()
	dir := tb.TempDir()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("valkeytest: certificates: %v", err)
		}
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		must(os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	serial := int64(1)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = time.Now().Add(-time.Minute)
		tmpl.NotAfter = time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		must(err)
		cert, err := x509.ParseCertificate(der)
		must(err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		must(err)
		return cert, key, der, keyDER
	}
	ca, caKey, caDER, _ := issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "fabric test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	_, _, srvDER, srvKey := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		// A redis-server that verifies clients checks its own certificate
		// for both uses.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	_, _, cliDER, cliKey := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "fabric test client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	return &Certs{
		CA:         write("ca.pem", "CERTIFICATE", caDER),
		ServerCert: write("server.pem", "CERTIFICATE", srvDER),
		ServerKey:  write("server.key", "EC PRIVATE KEY", srvKey),
		ClientCert: write("client.pem", "CERTIFICATE", cliDER),
		ClientKey:  write("client.key", "EC PRIVATE KEY", cliKey),
	}
}

// NewTLSServer starts a private server that listens on a free loopback
// port with TLS only (no plain TCP port; its unix socket stays plain),
// with certs' server certificate. With clientAuth it also requires a
// client certificate signed by certs' CA. It returns the server and its
// TLS address, host:port; the server is stopped when the test ends.
func NewTLSServer(tb testing.TB, certs *Certs, clientAuth bool, extraArgs ...string) (*valkey.Server, string) {
	tb.Helper()
	port := FreePort(tb)
	auth := "no"
	if clientAuth {
		auth = "yes"
	}
	args := append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
		"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", auth}, extraArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := valkey.StartServer(ctx, valkey.ServerConfig{ExtraArgs: args, Logger: Logger()})
	if err != nil {
		tb.Fatalf("valkeytest: start TLS server: %v", err)
	}
	tb.Cleanup(func() { s.Stop() })
	return s, "127.0.0.1:" + strconv.Itoa(port)
}

// NewTLSCluster starts a ClusterPrimaries-node cluster that speaks only
// TLS, to clients and on its cluster bus, with certs' server certificate
// and, when password is not empty, requirepass/masterauth password. It
// returns the nodes' TLS addresses once every node reports
// cluster_state:ok; the nodes are stopped when the test ends.
func NewTLSCluster(tb testing.TB, certs *Certs, password string) []string {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if cli, err = exec.LookPath("valkey-cli"); err != nil {
			tb.Fatalf("valkeytest: neither redis-cli nor valkey-cli is on PATH: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ports, err := freeClusterPorts(ClusterPrimaries)
	if err != nil {
		tb.Fatal(err)
	}
	var addrs []string
	for _, port := range ports {
		args := []string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
			"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000",
			"--cluster-require-full-coverage", "no"}
		if password != "" {
			args = append(args, "--requirepass", password, "--masterauth", password)
		}
		s, err := valkey.StartServer(ctx, valkey.ServerConfig{ExtraArgs: args, Logger: Logger()})
		if err != nil {
			tb.Fatalf("valkeytest: start TLS cluster node: %v", err)
		}
		tb.Cleanup(func() { s.Stop() })
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	create := append([]string{"--tls", "--cacert", certs.CA, "--cluster", "create"}, addrs...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, create...)
	if password != "" {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("valkeytest: %s --cluster create over TLS: %v: %s", cli, err, out)
	}
	tc, err := valkey.TLSOptions{CAFile: certs.CA}.Config()
	if err != nil {
		tb.Fatal(err)
	}
	for _, addr := range addrs {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, TLSConfig: tc, Password: password,
			ForceSingleClient: true, DisableCache: true})
		if err != nil {
			tb.Fatalf("valkeytest: TLS cluster node %s: %v", addr, err)
		}
		for {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				c.Close()
				tb.Fatalf("valkeytest: TLS cluster node %s not cluster_state:ok: %v", addr, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		c.Close()
	}
	return addrs
}
