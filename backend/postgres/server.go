package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/internal/childproc"
)

// DefaultBinDir is where Debian's postgresql-15 package installs the server
// binaries; FindBinDir also searches PATH and other major versions.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// ServerConfig configures a throwaway Postgres cluster.
type ServerConfig struct {
	// BinDir holds initdb and postgres. Empty means FindBinDir.
	BinDir string
	// Dir is the directory for the data directory, socket and log. Empty
	// means a fresh temporary directory removed by Stop.
	Dir string
	// Port is a loopback TCP port to listen on. 0 means no TCP listener:
	// the cluster is reachable only on its unix socket in Dir.
	Port int
	// RunAs is the OS user the server runs as when the host runs as root
	// (initdb and postgres refuse root). Empty means "postgres" if that
	// user exists, else "nobody". Ignored when not root.
	RunAs string
	// MaxLocksPerTransaction is max_locks_per_transaction; 0 means 512,
	// FlowFabric's recommendation for 256-way partitioned schemas.
	MaxLocksPerTransaction int
	// MaxConnections is max_connections; 0 means 100.
	MaxConnections int
	// Durable keeps fsync and synchronous commit on. Off by default: a
	// throwaway cluster trades durability for speed.
	Durable bool
	// TLSCertFile and TLSKeyFile, when set, turn ssl on with this PEM
	// server certificate and key (copied into Dir for the server's user).
	TLSCertFile, TLSKeyFile string
	// TLSCAFile, with TLSCertFile, is the CA that signs client
	// certificates (ssl_ca_file), for HBA rules with clientcert=.
	TLSCAFile string
	// HBA, when set, replaces the TCP rules of pg_hba.conf with these
	// lines, e.g. "hostssl all all 127.0.0.1/32 scram-sha-256"; unix
	// socket connections stay trusted (SocketURL).
	HBA []string
	// StartTimeout bounds initdb plus startup (default 60 s).
	StartTimeout time.Duration
	// Logger receives lifecycle logs (default slog.Default()).
	Logger *slog.Logger
}

// Server is a private Postgres cluster: its own data directory and unix
// socket, killed when the host exits (PDEATHSIG) or when Stop is called.
type Server struct {
	cfg     ServerConfig
	workDir childproc.Dir
	bin     string
	port    int
	uid     int // -1: same user as the host

	gid int

	child childproc.Child
}

// FindBinDir returns the directory holding initdb and postgres: DefaultBinDir,
// any /usr/lib/postgresql/*/bin, or the directory of initdb on PATH.
func FindBinDir() (string, error) {
	cands := []string{DefaultBinDir}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(m) > 0 {
		for i := len(m) - 1; i >= 0; i-- { // newest major first
			cands = append(cands, m[i])
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		cands = append(cands, filepath.Dir(p))
	}
	for _, d := range cands {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("postgres: initdb/postgres not found (on Debian: apt-get install postgresql-15)")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// StartServer runs initdb on a fresh data directory and starts postgres on
// it, waiting until it accepts connections. When the host runs as root the
// cluster runs as an unprivileged user (ServerConfig.RunAs).
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.MaxLocksPerTransaction <= 0 {
		cfg.MaxLocksPerTransaction = 512
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 100
	}
	s := &Server{cfg: cfg, bin: cfg.BinDir, port: cfg.Port, uid: -1, gid: -1}
	if s.bin == "" {
		b, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		s.bin = b
	}
	if s.port == 0 {
		s.port = 5432 // only names the socket file; no TCP listener
	}
	if os.Geteuid() == 0 {
		uid, gid, err := unprivilegedUser(cfg.RunAs)
		if err != nil {
			return nil, err
		}
		s.uid, s.gid = uid, gid
	}
	wd, err := childproc.MakeDir(cfg.Dir, "fabric-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.workDir = wd
	if err := s.prepare(ctx); err != nil {
		s.cleanupDir()
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		s.cleanupDir()
		return nil, err
	}
	return s, nil
}

// unprivilegedUser resolves the user a root host runs the cluster as.
func unprivilegedUser(name string) (uid, gid int, err error) {
	names := []string{name}
	if name == "" {
		names = []string{"postgres", "nobody"}
	}
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return uid, gid, nil
	}
	return 0, 0, fmt.Errorf("postgres: running as root and no unprivileged user among %q to run the cluster as", names)
}

func (s *Server) dataDir() string { return filepath.Join(s.workDir.Path, "data") }
func (s *Server) logPath() string { return filepath.Join(s.workDir.Path, "server.log") }

// sysProcAttr runs a child in its own process group, as the unprivileged
// user when the host is root, and kills it when the host dies.
func (s *Server) sysProcAttr() *syscall.SysProcAttr {
	a := childproc.Attr()
	if s.uid >= 0 {
		a.Credential = &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid), NoSetGroups: true}
	}
	return a
}

func (s *Server) childEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "HOME=" + s.workDir.Path, "TZ=UTC"}
}

// prepare hands the directory to the server user and runs initdb.
func (s *Server) prepare(ctx context.Context) error {
	if s.uid >= 0 {
		if err := os.Chown(s.workDir.Path, s.uid, s.gid); err != nil {
			return fmt.Errorf("postgres: chown %s: %w", s.workDir.Path, err)
		}
	}
	if err := os.Chmod(s.workDir.Path, 0o700); err != nil {
		return fmt.Errorf("postgres: chmod %s: %w", s.workDir.Path, err)
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ictx, filepath.Join(s.bin, "initdb"),
		"-D", s.dataDir(), "--username=postgres", "--auth=trust", "--encoding=UTF8",
		"--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = s.workDir.Path
	cmd.Env = s.childEnv()
	cmd.SysProcAttr = s.sysProcAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("postgres: initdb: %w: %s", err, childproc.LogTail(out.Bytes(), 5))
	}
	if s.cfg.HBA != nil {
		hba := "local all all trust\n" + strings.Join(s.cfg.HBA, "\n") + "\n"
		if err := s.writeOwned(filepath.Join(s.dataDir(), "pg_hba.conf"), []byte(hba)); err != nil {
			return err
		}
	}
	if s.cfg.TLSCertFile != "" {
		files := map[string]string{s.cfg.TLSCertFile: "server.crt", s.cfg.TLSKeyFile: "server.key"}
		if s.cfg.TLSCAFile != "" {
			files[s.cfg.TLSCAFile] = "ca.crt"
		}
		for src, dst := range files {
			b, err := os.ReadFile(src)
			if err != nil {
				return fmt.Errorf("postgres: TLS file: %w", err)
			}
			if err := s.writeOwned(filepath.Join(s.dataDir(), dst), b); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOwned writes a 0600 file owned by the server's user (postgres
// refuses a key file others can read).
func (s *Server) writeOwned(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("postgres: write %s: %w", path, err)
	}
	if s.uid >= 0 {
		if err := os.Chown(path, s.uid, s.gid); err != nil {
			return fmt.Errorf("postgres: chown %s: %w", path, err)
		}
	}
	return nil
}

func (s *Server) args() []string {
	listen := ""
	if s.cfg.Port != 0 {
		listen = "127.0.0.1"
	}
	a := []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", s.workDir.Path,
		"-c", "listen_addresses=" + listen,
		"-c", "max_connections=" + strconv.Itoa(s.cfg.MaxConnections),
		"-c", "max_locks_per_transaction=" + strconv.Itoa(s.cfg.MaxLocksPerTransaction),
		"-c", "shared_buffers=64MB",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
		"-c", "dynamic_shared_memory_type=mmap",
	}
	if s.cfg.TLSCertFile != "" {
		a = append(a, "-c", "ssl=on", "-c", "ssl_cert_file=server.crt", "-c", "ssl_key_file=server.key")
		if s.cfg.TLSCAFile != "" {
			a = append(a, "-c", "ssl_ca_file=ca.crt")
		}
	}
	if !s.cfg.Durable {
		a = append(a, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "wal_level=minimal", "-c", "max_wal_senders=0", "-c", "max_wal_size=1GB")
	}
	return a
}

func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("postgres: server log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), s.args()...)
	cmd.Dir = s.workDir.Path
	cmd.Env = s.childEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = s.sysProcAttr()
	if err := s.child.Start(cmd); err != nil {
		return fmt.Errorf("postgres: start %s: %w", cmd.Path, err)
	}
	ping := func() error { return s.ping(ctx) }
	switch err := s.child.WaitReady(ctx, ping, 20*time.Millisecond, s.cfg.StartTimeout); {
	case errors.Is(err, childproc.ErrExited):
		b, _ := os.ReadFile(s.logPath())
		return fmt.Errorf("postgres: server exited during start: %s", childproc.LogTail(b, 5))
	case errors.Is(err, childproc.ErrNotReady):
		b, _ := os.ReadFile(s.logPath())
		return fmt.Errorf("postgres: server did not accept connections within %s: %s", s.cfg.StartTimeout, childproc.LogTail(b, 5))
	case err != nil:
		return fmt.Errorf("postgres: waiting for server start: %w", err)
	}
	s.cfg.Logger.Debug("postgres server started", "pid", s.child.PID(), "dir", s.workDir.Path, "port", s.cfg.Port)
	return nil
}

func (s *Server) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := pgx.Connect(pctx, s.SocketURL("postgres"))
	if err != nil {
		return err
	}
	return c.Close(pctx)
}

// URL is a libpq/pgx URL for database db over the unix socket (or over TCP
// when the server was started with a Port).
func (s *Server) URL(db string) string {
	if s.cfg.Port != 0 {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.cfg.Port, url.PathEscape(db))
	}
	return s.SocketURL(db)
}

// SocketURL is a libpq/pgx URL for database db over the unix socket,
// whatever Port is (socket connections are trusted).
func (s *Server) SocketURL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", url.PathEscape(db), url.QueryEscape(s.workDir.Path), s.port)
}

// Dir is the cluster's directory (data directory, socket, log).
func (s *Server) Dir() string { return s.workDir.Path }

// Socket is the unix socket path.
func (s *Server) Socket() string {
	return filepath.Join(s.workDir.Path, ".s.PGSQL."+strconv.Itoa(s.port))
}

// PID is the postmaster's process id (0 when not running).
func (s *Server) PID() int { return s.child.PID() }

// Kill stops the cluster abruptly (SIGKILL to its process group: the
// postmaster and its backends), as a crash would, keeping its directory.
func (s *Server) Kill() { s.child.Kill() }

// Restart kills the cluster (Kill: SIGKILL to the postmaster and its
// backends, as a crash would) and starts it again on the same directory
// and socket: the server recovers from its write-ahead log. Without
// Durable, commits acknowledged in the last moments before the kill may
// be lost (synchronous_commit is off).
func (s *Server) Restart(ctx context.Context) error {
	s.child.Kill()
	return s.start(ctx)
}

// RestartGracefully restarts the cluster as `pg_ctl restart -m fast`
// does: a fast shutdown (SIGINT: sessions are ended, a checkpoint is
// written), up to 10 s to exit (then SIGKILL), and a start on the same
// directory and socket.
func (s *Server) RestartGracefully(ctx context.Context) error {
	s.child.Terminate(syscall.SIGINT, 10*time.Second)
	return s.start(ctx)
}

// Stop shuts the cluster down (fast shutdown, then SIGKILL after 10 s),
// waits for every server process to exit and removes the directory when it
// was created by StartServer. It is safe to call more than once.
func (s *Server) Stop() error {
	if !s.child.Stop(syscall.SIGINT, 10*time.Second) { // SIGINT: fast shutdown
		return nil
	}
	return s.cleanupDir()
}

func (s *Server) cleanupDir() error {
	if err := s.workDir.Remove(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}
