package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/internal/redact"
)

// pgFlags are the flags of commands that talk to Postgres.
type pgFlags struct {
	url string
}

func addPostgresFlags(fs *flag.FlagSet) *pgFlags {
	p := &pgFlags{}
	fs.StringVar(&p.url, "postgres-url", "", "Postgres URL (postgres://user@host:port/db, or ?host=/socket/dir). Empty: start a throwaway cluster (initdb on a temp dir, unix socket only) for this run.")
	return p
}

// pgTarget is the database a command works on and, without --postgres-url,
// the throwaway cluster holding it.
type pgTarget struct {
	URL    string
	Server *postgres.Server
	Where  string
}

// Close stops the throwaway cluster, if any, and removes its directory.
func (t *pgTarget) Close() {
	if t.Server != nil {
		t.Server.Stop()
	}
}

// target resolves --postgres-url, starting a throwaway cluster when it is
// empty.
func (p *pgFlags) target(ctx context.Context, progress io.Writer) (*pgTarget, error) {
	if p.url != "" {
		return &pgTarget{URL: p.url, Where: "database " + redact.URL(p.url)}, nil
	}
	fmt.Fprintln(progress, "no --postgres-url: starting a throwaway Postgres cluster (initdb)...")
	srv, err := postgres.StartServer(ctx, postgres.ServerConfig{})
	if err != nil {
		return nil, err
	}
	return &pgTarget{URL: srv.URL("postgres"), Server: srv,
		Where: fmt.Sprintf("throwaway cluster (pid %d, %s)", srv.PID(), srv.Dir())}, nil
}
