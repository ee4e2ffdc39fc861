package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/internal/redact"
)

// pgFlags are the flags of commands that talk to Postgres.
type pgFlags struct {
	url string
	// passwordFile holds the password; default $FABRIC_POSTGRES_PASSWORD,
	// then what pgx reads (the URL, PGPASSWORD, PGPASSFILE).
	passwordFile string
}

// envPostgresPassword is the environment variable of the Postgres
// password (PGPASSWORD works too, through pgx).
const envPostgresPassword = "FABRIC_POSTGRES_PASSWORD"

func addPostgresFlags(fs *flag.FlagSet) *pgFlags {
	p := &pgFlags{}
	fs.StringVar(&p.passwordFile, "postgres-password-file", "", "file holding the Postgres password (default: $"+envPostgresPassword+", else the URL's, PGPASSWORD or PGPASSFILE); TLS is the URL's sslmode (verify-full), sslrootcert, sslcert and sslkey")
	fs.StringVar(&p.url, "postgres-url", "", "Postgres URL (postgres://user@host:port/db, or ?host=/socket/dir). Empty: start a throwaway cluster (initdb on a temp dir, unix socket only) for this run.")
	return p
}

// givenFlags is the set of fs's flags given on the command line (or, in
// `fabric run`, by its --config file, which sets them through fs.Set).
func givenFlags(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	return given
}

// checkPasswordFile refuses --postgres-password-file without
// --postgres-url (where the command would read no password: the
// throwaway cluster takes none, and Valkey has its own flags) rather than
// ignore it.
func (p *pgFlags) checkPasswordFile(fs *flag.FlagSet) error {
	if p.url == "" && givenFlags(fs)["postgres-password-file"] {
		return fmt.Errorf("%w: --postgres-password-file applies with --postgres-url only (the password of that database): give --postgres-url or drop it", errUsage)
	}
	return nil
}

// pgTarget is the database a command works on and, without --postgres-url,
// the throwaway cluster holding it.
type pgTarget struct {
	URL string
	// Password, when set, wins over the URL's.
	Password string
	Server   *postgres.Server
	Where    string
}

// Close stops the throwaway cluster, if any, and removes its directory.
func (t *pgTarget) Close() {
	if t.Server != nil {
		t.Server.Stop()
	}
}

// target resolves --postgres-url, starting a throwaway cluster when it is
// empty.
func (p *pgFlags) target(ctx context.Context, env *cliEnv) (*pgTarget, error) {
	if p.url != "" {
		t := &pgTarget{URL: p.url, Where: "database " + redact.URL(p.url), Password: env.env(envPostgresPassword)}
		if p.passwordFile != "" {
			b, err := os.ReadFile(p.passwordFile)
			if err != nil {
				return nil, fmt.Errorf("--postgres-password-file: %w", err)
			}
			if t.Password = strings.TrimRight(string(b), "\r\n"); t.Password == "" {
				return nil, fmt.Errorf("--postgres-password-file %s is empty", p.passwordFile)
			}
		}
		return t, nil
	}
	fmt.Fprintln(env.stdout, "no --postgres-url: starting a throwaway Postgres cluster (initdb)...")
	srv, err := postgres.StartServer(ctx, postgres.ServerConfig{})
	if err != nil {
		return nil, err
	}
	return &pgTarget{URL: srv.URL("postgres"), Server: srv,
		Where: fmt.Sprintf("throwaway cluster (pid %d, %s)", srv.PID(), srv.Dir())}, nil
}

// pool opens a pgx pool on the target and pings it.
func (t *pgTarget) pool(ctx context.Context) (*pgxpool.Pool, error) {
	pc, err := postgres.ParsePoolConfig(t.URL, t.Password)
	if err != nil {
		return nil, err
	}
	secrets := append(redact.Secrets(t.URL), t.Password)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("postgres: %w", err), secrets...)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, redact.Error(fmt.Errorf("postgres: %w", err), secrets...)
	}
	return pool, nil
}

// pgSession is a Postgres client on a command's target whose schema
// fabric migrate prepared, with a logger of errors to stderr; neither its
// log lines nor the errors open and redact return carry the password.
type pgSession struct {
	*pgTarget
	Client  *postgres.Client
	Log     *slog.Logger
	secrets []string
}

// open resolves the target and connects to it (4 connections), refusing
// a database without fabric's schema with a message naming fabric
// migrate.
func (p *pgFlags) open(ctx context.Context, env *cliEnv) (*pgSession, error) {
	t, err := p.target(ctx, env)
	if err != nil {
		return nil, err
	}
	s := &pgSession{pgTarget: t, secrets: append(redact.Secrets(t.URL), t.Password)}
	s.Log = slog.New(redact.Handler(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelError}), s.secrets...))
	if s.Client, err = postgres.Connect(ctx, postgres.ClientConfig{URL: t.URL, Password: t.Password, Logger: s.Log, MaxConns: 4}); err != nil {
		t.Close()
		return nil, s.redact(fmt.Errorf("%s: %w", t.Where, err))
	}
	if err := postgres.CheckSchema(ctx, s.Client.Pool()); err != nil {
		s.Close()
		return nil, s.redact(fmt.Errorf("%s: %w", t.Where, err))
	}
	return s, nil
}

// Close closes the client and stops a throwaway cluster.
func (s *pgSession) Close() {
	s.Client.Close()
	s.pgTarget.Close()
}

// redact takes the session's secrets out of err (nil stays nil).
func (s *pgSession) redact(err error) error { return redact.Error(err, s.secrets...) }
