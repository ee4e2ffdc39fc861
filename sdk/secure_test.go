package sdk_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// roundTrip drives one execution through the SDK over vc: create it, let
// a worker run it, and wait until it reads as completed.
func roundTrip(t *testing.T, vc *valkey.Client) {
	t.Helper()
	ctx := valkeytest.Context(t, 30*time.Second)
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{"secure"}}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatalf("sdk client: %v", err)
	}
	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "secure", Kind: "k", Payload: []byte("p")})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "secure-w", Lanes: []string{"secure"}, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	defer w.Close(context.Background())
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx, func(context.Context, *sdk.Job) error { return nil }) }()
	defer func() { stop(); <-done }()
	for {
		st, err := c.State(ctx, id)
		if err != nil {
			t.Fatalf("state: %v", err)
		}
		if st.PublicState == "completed" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("execution %s is %s, not completed, after 30s", id, st.PublicState)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// aclArgs start a server whose default user needs defaultPW and whose
// ACL user alice needs alicePW.
func aclArgs(defaultPW, alicePW string) []string {
	return []string{"--requirepass", defaultPW, "--user", "alice", "on", ">" + alicePW, "~*", "&*", "+@all"}
}

// TestSDKAuth connects the SDK to a server that requires a password, as
// the default user (password in the URL) and as an ACL user (user and
// password in ClientConfig), and drives an execution through each; a
// wrong password or none is a clear error that quotes no password.
func TestSDKAuth(t *testing.T) {
	t.Parallel()
	const defaultPW, alicePW = "default-Pw-1", "alice-Pw-2"
	srv := valkeytest.NewTCPServer(t, aclArgs(defaultPW, alicePW)...)
	ctx := valkeytest.Context(t, 30*time.Second)
	dial := func(cfg valkey.ClientConfig) (*valkey.Client, error) {
		cfg.Logger = valkeytest.Logger()
		vc, err := valkey.Dial(ctx, cfg)
		if err == nil {
			t.Cleanup(vc.Close)
		}
		return vc, err
	}
	t.Run("DefaultUserInURL", func(t *testing.T) {
		vc, err := dial(valkey.ClientConfig{URL: "redis://:" + defaultPW + "@" + srv.TCPAddr(), DB: 1})
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, vc)
	})
	t.Run("ACLUserInConfig", func(t *testing.T) {
		vc, err := dial(valkey.ClientConfig{URL: "redis://" + srv.TCPAddr(), DB: 2, Username: "alice", Password: alicePW})
		if err != nil {
			t.Fatal(err)
		}
		who, err := vc.Raw().Do(ctx, vc.Raw().B().AclWhoami().Build()).ToString()
		if err != nil || who != "alice" {
			t.Fatalf("ACL WHOAMI = %q, %v; want alice", who, err)
		}
		roundTrip(t, vc)
	})
	t.Run("WrongPassword", func(t *testing.T) {
		// alice's password for the default user, and a wrong one for alice.
		for _, cfg := range []valkey.ClientConfig{
			{URL: "redis://:" + alicePW + "@" + srv.TCPAddr()},
			{URL: "redis://" + srv.TCPAddr(), Username: "alice", Password: "not-" + alicePW},
		} {
			_, err := dial(cfg)
			if err == nil {
				t.Fatalf("%s as %q: connected with a wrong password", cfg.URL, cfg.Username)
			}
			if !errors.Is(err, valkey.ErrAuth) || valkey.IsUnreachable(err) {
				t.Errorf("wrong password: not ErrAuth, or called unreachable: %v", err)
			}
			msg := err.Error()
			t.Logf("wrong password: %s", msg)
			if !strings.Contains(msg, "authentication refused") || !strings.Contains(msg, "WRONGPASS") ||
				strings.Contains(msg, alicePW) || strings.Contains(msg, defaultPW) {
				t.Errorf("wrong password: %q", msg)
			}
		}
	})
	t.Run("NoPassword", func(t *testing.T) {
		_, err := dial(valkey.ClientConfig{URL: "redis://" + srv.TCPAddr()})
		if err == nil || !strings.Contains(err.Error(), "requires authentication") {
			t.Fatalf("no password: %v", err)
		}
	})
}

// TestSDKTLS connects the SDK over TLS to a server that also verifies
// client certificates, and drives an execution through it; a server
// certificate from an unknown CA, a name the certificate lacks, and a
// missing client certificate are clear errors.
func TestSDKTLS(t *testing.T) {
	t.Parallel()
	certs := valkeytest.NewCerts(t)
	_, addr := valkeytest.NewTLSServer(t, certs, true)
	_, port, _ := strings.Cut(addr, ":")
	ctx := valkeytest.Context(t, 30*time.Second)
	dial := func(url string, o valkey.TLSOptions) (*valkey.Client, error) {
		tc, err := o.Config()
		if err != nil {
			t.Fatal(err)
		}
		vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, TLS: tc, Logger: valkeytest.Logger()})
		if err == nil {
			t.Cleanup(vc.Close)
		}
		return vc, err
	}
	full := valkey.TLSOptions{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	t.Run("Verified", func(t *testing.T) {
		for _, url := range []string{"rediss://" + addr, "rediss://localhost:" + port} {
			vc, err := dial(url, full)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			roundTrip(t, vc)
		}
	})
	t.Run("UntrustedCA", func(t *testing.T) {
		other := valkeytest.NewCerts(t)
		_, err := dial("rediss://"+addr, valkey.TLSOptions{CAFile: other.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey})
		if err == nil || !strings.Contains(err.Error(), "not signed by a trusted CA") || !errors.Is(err, valkey.ErrTLS) {
			t.Fatalf("untrusted CA: %v", err)
		}
		t.Logf("untrusted CA: %v", err)
		// The system's roots do not know the test CA either.
		if _, err := dial("rediss://"+addr, valkey.TLSOptions{CertFile: certs.ClientCert, KeyFile: certs.ClientKey}); err == nil ||
			!strings.Contains(err.Error(), "not signed by a trusted CA") {
			t.Fatalf("system roots: %v", err)
		}
	})
	t.Run("WrongServerName", func(t *testing.T) {
		o := full
		o.ServerName = "valkey.example"
		_, err := dial("rediss://"+addr, o)
		if err == nil || !strings.Contains(err.Error(), "does not name this host") {
			t.Fatalf("wrong server name: %v", err)
		}
	})
	t.Run("NoClientCertificate", func(t *testing.T) {
		_, err := dial("rediss://"+addr, valkey.TLSOptions{CAFile: certs.CA})
		if err == nil || !strings.Contains(err.Error(), "may require a client certificate") {
			t.Fatalf("no client certificate: %v", err)
		}
		t.Logf("no client certificate: %v", err)
	})
	t.Run("PlainToTLSPort", func(t *testing.T) {
		tc, _ := full.Config()
		_, err := valkey.Dial(ctx, valkey.ClientConfig{URL: "unix:///nonexistent.sock", TLS: tc})
		if err == nil || !strings.Contains(err.Error(), "TCP URL") {
			t.Fatalf("TLS over a unix socket: %v", err)
		}
	})
}

// TestSDKTLSCluster drives an execution through the SDK on a cluster
// whose nodes speak only TLS and require a password.
func TestSDKTLSCluster(t *testing.T) {
	t.Parallel()
	certs := valkeytest.NewCerts(t)
	const pw = "cluster-Pw-3"
	addrs := valkeytest.NewTLSCluster(t, certs, pw)
	tc, err := valkey.TLSOptions{CAFile: certs.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	ctx := valkeytest.Context(t, 30*time.Second)
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: "rediss+cluster://" + strings.Join(addrs, ","), Password: pw, TLS: tc,
		Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	if !vc.IsCluster() {
		t.Fatal("not a cluster client")
	}
	roundTrip(t, vc)
	if _, err := valkey.Dial(ctx, valkey.ClientConfig{URL: "rediss+cluster://" + strings.Join(addrs, ","), Password: "not-" + pw, TLS: tc}); !errors.Is(err, valkey.ErrAuth) {
		t.Fatalf("wrong password on the cluster: %v", err)
	}
}

// BenchmarkCreateOverTransport measures CreateExecution, one at a time
// (latency) and from 8 goroutines (throughput), over a unix socket, plain
// TCP, TCP with an ACL user, and TLS with a client certificate, each on
// its own private server:
//
//	go test -run '^$' -bench CreateOverTransport -benchtime 3000x ./sdk
func BenchmarkCreateOverTransport(b *testing.B) {
	certs := valkeytest.NewCerts(b)
	const pw = "bench-Pw"
	full, err := valkey.TLSOptions{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}.Config()
	if err != nil {
		b.Fatal(err)
	}
	unixSrv := valkeytest.NewServer(b)
	tcpSrv := valkeytest.NewTCPServer(b)
	aclSrv := valkeytest.NewTCPServer(b, aclArgs("x-"+pw, pw)...)
	_, tlsAddr := valkeytest.NewTLSServer(b, certs, true)
	for _, tc := range []struct {
		name string
		cfg  valkey.ClientConfig
	}{
		{"unix", valkey.ClientConfig{URL: unixSrv.URL()}},
		{"tcp", valkey.ClientConfig{URL: "redis://" + tcpSrv.TCPAddr()}},
		{"tcp+acl", valkey.ClientConfig{URL: "redis://" + aclSrv.TCPAddr(), Username: "alice", Password: pw}},
		{"tls+clientcert", valkey.ClientConfig{URL: "rediss://" + tlsAddr, TLS: full}},
	} {
		ctx := context.Background()
		tc.cfg.Logger = valkeytest.Logger()
		vc, err := valkey.Dial(ctx, tc.cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{"bench"}}); err != nil {
			b.Fatal(err)
		}
		c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
		if err != nil {
			b.Fatal(err)
		}
		spec := sdk.ExecutionSpec{Lane: "bench", Kind: "k", Payload: []byte("payload")}
		b.Run(tc.name+"/sequential", func(b *testing.B) {
			for range b.N {
				if _, err := c.CreateExecution(ctx, spec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/parallel8", func(b *testing.B) {
			b.SetParallelism(8 / max(1, runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.CreateExecution(ctx, spec); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		vc.Close()
	}
}
