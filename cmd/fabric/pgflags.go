package main

import (
	"context"
	"flag"
	"fmt"
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
