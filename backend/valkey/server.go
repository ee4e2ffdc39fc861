package valkey

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fabric-host/fabric/internal/childproc"
)

// ServerConfig configures a private server child.
type ServerConfig struct {
	// Binary is the server executable. Empty means valkey-server if it is on
	// PATH, else redis-server.
	Binary string
	// Dir is the working directory for the socket, logs and any persistence.
	// Empty means a fresh temporary directory removed by Stop.
	Dir string
	// Port is a loopback TCP port to listen on. 0 means no TCP listener: the
	// server is reachable only on its private unix socket.
	Port int
	// Persist keeps RDB snapshots in Dir. Off by default (no persistence).
	Persist bool
	// Databases is the number of logical databases (default 16). Tests use
	// many so each test gets its own.
	Databases int
	// ExtraArgs are appended to the command line, e.g. "--cluster-enabled",
	// "yes".
	ExtraArgs []string
	// StartTimeout bounds how long Start waits for the server to answer
	// (default 10 s).
	StartTimeout time.Duration
	// Logger receives lifecycle logs (default slog.Default()).
	Logger *slog.Logger
}

// Server is a valkey-server or redis-server child process private to this
// host: its own directory and unix socket, no persistence unless asked, and
// killed when the host exits (PDEATHSIG) or when Stop is called.
type Server struct {
	cfg     ServerConfig
	workDir childproc.Dir
	socket  string
	binary  string
	version string

	child childproc.Child
}

// FindServerBinary returns valkey-server if it is on PATH, else
// redis-server, else an error saying how to install one.
func FindServerBinary() (string, error) {
	for _, name := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("valkey: neither valkey-server nor redis-server is on PATH (on Debian: apt-get install redis-server)")
}

// StartServer starts a private server and waits until it answers PING.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	if cfg.Databases <= 0 {
		cfg.Databases = 16
	}
	s := &Server{cfg: cfg, binary: cfg.Binary}
	if s.binary == "" {
		b, err := FindServerBinary()
		if err != nil {
			return nil, err
		}
		s.binary = b
	}
	wd, err := childproc.MakeDir(cfg.Dir, "fabric-valkey-")
	if err != nil {
		return nil, fmt.Errorf("valkey: %w", err)
	}
	s.workDir = wd
	s.socket = filepath.Join(s.workDir.Path, "valkey.sock")
	if err := s.start(ctx); err != nil {
		s.workDir.Remove()
		return nil, err
	}
	return s, nil
}

func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.cfg.Port),
		"--bind", "127.0.0.1",
		"--unixsocket", s.socket,
		"--unixsocketperm", "700",
		"--dir", s.workDir.Path,
		"--logfile", filepath.Join(s.workDir.Path, "server.log"),
		"--daemonize", "no",
		"--databases", strconv.Itoa(s.cfg.Databases),
		"--appendonly", "no",
		"--protected-mode", "yes",
	}
	if !s.cfg.Persist {
		a = append(a, "--save", "")
	} else {
		a = append(a, "--save", "60 1")
	}
	return append(a, s.cfg.ExtraArgs...)
}

func (s *Server) start(ctx context.Context) error {
	os.Remove(s.socket)
	cmd := exec.Command(s.binary, s.args()...)
	cmd.Dir = s.workDir.Path
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	// Killed with the host even if the host dies without running Stop.
	if err := s.child.Start(cmd); err != nil {
		return fmt.Errorf("valkey: start %s: %w", s.binary, err)
	}
	switch err := s.child.WaitReady(ctx, s.ping, 10*time.Millisecond, s.cfg.StartTimeout); {
	case errors.Is(err, childproc.ErrExited):
		logTail, _ := os.ReadFile(filepath.Join(s.workDir.Path, "server.log"))
		return fmt.Errorf("valkey: %s exited during start: %s %s", s.binary, bytes.TrimSpace(stderr.Bytes()), childproc.LogTail(logTail, 5))
	case errors.Is(err, childproc.ErrNotReady):
		return fmt.Errorf("valkey: %s did not answer PING within %s", s.binary, s.cfg.StartTimeout)
	case err != nil:
		return fmt.Errorf("valkey: waiting for server start: %w", err)
	}
	s.cfg.Logger.Debug("valkey server started", "binary", s.binary, "pid", s.child.PID(), "socket", s.socket, "port", s.cfg.Port)
	return nil
}

// ping sends an inline PING over the unix socket and expects +PONG (or
// -NOAUTH from a server that requires a password).
func (s *Server) ping() error {
	c, err := net.DialTimeout("unix", s.socket, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	// A server with requirepass or a disabled default user answers
	// NOAUTH: it is up, and the client authenticates.
	if !bytes.HasPrefix(buf[:n], []byte("+PONG")) && !bytes.HasPrefix(buf[:n], []byte("-NOAUTH")) {
		return fmt.Errorf("unexpected PING reply %q", buf[:n])
	}
	return nil
}

// URL is the valkey-go URL of the private unix socket.
func (s *Server) URL() string { return "unix://" + s.socket }

// TCPAddr is "127.0.0.1:<port>", or "" when the server has no TCP listener.
func (s *Server) TCPAddr() string {
	if s.cfg.Port == 0 {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(s.cfg.Port)
}

// Socket is the unix socket path.
func (s *Server) Socket() string { return s.socket }

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.workDir.Path }

// Binary is the executable that was started.
func (s *Server) Binary() string { return s.binary }

// PID is the child's process id (0 when not running).
func (s *Server) PID() int { return s.child.PID() }

// Kill stops the server abruptly (SIGKILL to its process group: the
// server never forks children of its own with persistence off, but a
// BGSAVE child would be in it), as a crash would, keeping its directory
// so Restart can bring it back on the same socket.
func (s *Server) Kill() { s.child.Kill() }

// Restart kills the server if it is running and starts it again on the same
// socket and directory. Without persistence the new server is empty, which
// is how tests exercise library reload after a server restart.
func (s *Server) Restart(ctx context.Context) error {
	s.child.Kill()
	return s.start(ctx)
}

// RestartGracefully stops the server with SIGTERM (it flushes its
// append-only file or snapshot on the way out, when persistence is on),
// waits up to 30 s for it to exit (then kills it), and starts it again on
// the same socket and directory.
func (s *Server) RestartGracefully(ctx context.Context) error {
	s.child.Terminate(syscall.SIGTERM, 30*time.Second)
	return s.start(ctx)
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5 s) and removes
// its temporary directory. It is safe to call more than once.
func (s *Server) Stop() error {
	if !s.child.Stop(syscall.SIGTERM, 5*time.Second) {
		return nil
	}
	if err := s.workDir.Remove(); err != nil {
		return fmt.Errorf("valkey: %w", err)
	}
	return nil
}
