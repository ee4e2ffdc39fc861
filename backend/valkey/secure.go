package valkey

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	vk "github.com/valkey-io/valkey-go"
)

// TLSOptions name the files of a TLS connection to Valkey. The zero value
// verifies the server against the system's roots.
type TLSOptions struct {
	// CAFile is a PEM bundle of the CAs that sign the server's
	// certificate (default: the system's roots).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// a server that verifies clients (tls-auth-clients). Both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry (default:
	// the URL's host).
	ServerName string
}

// IsZero reports whether no option is set.
func (o TLSOptions) IsZero() bool { return o == TLSOptions{} }

// Config builds the tls.Config the options describe (TLS 1.2 or later).
func (o TLSOptions) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("valkey: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("valkey: TLS CA file %s: no PEM certificate in it", o.CAFile)
		}
		c.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("valkey: a TLS client certificate needs both its certificate and its key file")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("valkey: TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ErrAuth marks a connection the server refused for its credentials
// (WRONGPASS, NOAUTH, NOPERM); ErrTLS one that failed its TLS handshake
// (an untrusted or misnamed certificate, a missing client certificate).
// Retrying either cannot help.
var (
	ErrAuth = errors.New("valkey: authentication refused")
	ErrTLS  = errors.New("valkey: TLS handshake failed")
)

// IsUnreachable reports whether err, from Dial, means the server is not
// there yet (refused, reset, missing socket, timeout, still loading its
// data) rather than refusing this client: such a dial may succeed later.
func IsUnreachable(err error) bool {
	if err == nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrTLS) {
		return false
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ENOENT, syscall.EHOSTUNREACH,
		syscall.ENETUNREACH, syscall.ECONNABORTED, syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "LOADING") || strings.Contains(msg, "connection refused")
}

// applySecurity sets cfg's credentials and TLS on opt, over what the URL
// gave.
func applySecurity(opt *vk.ClientOption, cfg ClientConfig) error {
	if cfg.Username != "" {
		opt.Username = cfg.Username
	}
	if cfg.Password != "" {
		opt.Password = cfg.Password
	}
	if cfg.TLS == nil {
		return nil
	}
	if opt.DialCtxFn != nil || opt.DialFn != nil {
		return errors.New("valkey: TLS options need a TCP URL (rediss://host:port), not a unix socket")
	}
	tc := cfg.TLS.Clone()
	if tc.ServerName == "" && len(opt.InitAddress) > 0 {
		if opt.TLSConfig != nil && opt.TLSConfig.ServerName != "" {
			tc.ServerName = opt.TLSConfig.ServerName
		} else if host, _, err := net.SplitHostPort(opt.InitAddress[0]); err == nil {
			tc.ServerName = host
		}
	}
	if opt.TLSConfig != nil && opt.TLSConfig.InsecureSkipVerify {
		tc.InsecureSkipVerify = true // the URL's skip_verify
	}
	opt.TLSConfig = tc
	return nil
}

// explainConnectError turns the server's and the TLS stack's answers to a
// failed handshake into what the operator must fix; tlsNoCert says the
// connection is TLS without a client certificate. It never quotes a
// password.
func explainConnectError(err error, where, user string, tlsNoCert bool) error {
	if err == nil {
		return nil
	}
	if user == "" {
		user = "default"
	}
	msg := err.Error()
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case strings.Contains(msg, "WRONGPASS"):
		return fmt.Errorf("%w by %s for user %q: wrong password, or the user does not exist or is disabled (check the URL, --valkey-user, --valkey-password-file or FABRIC_VALKEY_PASSWORD): %w", ErrAuth, where, user, err)
	case strings.Contains(msg, "NOAUTH"):
		return fmt.Errorf("%w: %s requires authentication and no password was given (URL, --valkey-password-file or FABRIC_VALKEY_PASSWORD): %w", ErrAuth, where, err)
	case strings.Contains(msg, "NOPERM"):
		return fmt.Errorf("%w: user %q on %s lacks a permission fabric needs (its ACL must allow fabric's commands, keys and channels): %w", ErrAuth, user, where, err)
	case errors.As(err, &unknownAuthority):
		return fmt.Errorf("%w with %s: the server's certificate is not signed by a trusted CA (give its CA with --valkey-tls-ca): %w", ErrTLS, where, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w with %s: the server's certificate does not name this host (see --valkey-tls-server-name): %w", ErrTLS, where, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w with %s: the server's certificate is invalid: %w", ErrTLS, where, err)
	case tlsNoCert && (strings.Contains(msg, "certificate required") || strings.Contains(msg, "connection reset") ||
		errors.Is(err, io.EOF) || strings.Contains(msg, "bad certificate")):
		// With TLS 1.3 the server refuses a missing client certificate
		// after the client's side of the handshake: the client sees a
		// reset or an alert on its first command.
		return fmt.Errorf("%w with %s: the server closed the connection; it may require a client certificate (--valkey-tls-cert and --valkey-tls-key): %w", ErrTLS, where, err)
	}
	return err
}
