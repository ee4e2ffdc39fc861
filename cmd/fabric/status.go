package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/internal/statusview"
	"github.com/fabric-host/fabric/model"
)

func init() {
	register(&command{
		name: "status",
		summary: "Show a running deployment like `fabric run`'s live view: plugins (version, state, cycles, items, errors, lag, last swap), " +
			"executions by state and throughput, from a host's admin server, --valkey-url or --postgres-url.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			addr := fs.String("admin", "http://"+admin.ServerAddrDefault, "admin server of a running host; its /status has everything")
			adminCA := fs.String("admin-ca", "", "PEM CA that signs an https --admin server's certificate (default: the system's roots)")
			url := fs.String("valkey-url", "", "read the keyspace directly (executions, lag, throughput); plugins then come from --admin or --status-file when reachable")
			cf := addConnFlags(fs)
			pg := &pgFlags{}
			fs.StringVar(&pg.url, "postgres-url", "", "read a Postgres database directly (executions, lag, throughput), as --valkey-url reads a keyspace; plugins then come from --admin or --status-file when reachable")
			fs.StringVar(&pg.passwordFile, "postgres-password-file", "", "with --postgres-url: file holding the Postgres password (default: $"+envPostgresPassword+", else the URL's, PGPASSWORD or PGPASSFILE)")
			statusFile := fs.String("status-file", "", "a host's status file (fabric run --status-file) for the plugins")
			sample := fs.Duration("sample", time.Second, "time between the two reads that throughput and ACTED/S are measured over (0: one read, no rates)")
			asJSON := fs.Bool("json", false, "print the report as JSON")
			partitions := &partitionsFlag{}
			fs.Var(partitions, "partitions", "with --valkey-url: the deployment's partition counts, flow=N,budget=N,quota=N (default 256/32/32)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				var rep admin.Report
				var rates map[string]float64
				hc, err := adminClient(*adminCA)
				if err != nil {
					return err
				}
				if *url != "" && pg.url != "" {
					return fmt.Errorf("%w: --valkey-url and --postgres-url: give one backend", errUsage)
				}
				if err := pg.checkPasswordFile(fs); err != nil {
					return err
				}
				if pg.url != "" && partitions.PartitionConfig != (model.PartitionConfig{}) {
					return fmt.Errorf("%w: --partitions does not apply with --postgres-url: a database's partition counts are FlowFabric's 256/32/32", errUsage)
				}
				switch {
				case pg.url != "":
					rep, rates, err = postgresReport(ctx, env, pg, *statusFile, hc, *addr, *sample)
					if err != nil {
						return err
					}
				case *url == "":
					// Two reports, --sample apart: ACTED/S is the difference.
					status := strings.TrimSuffix(*addr, "/") + "/status"
					rep, err = fetchReport(ctx, hc, status)
					if err != nil {
						return fmt.Errorf("%w (is `fabric run` running? pass --admin, --valkey-url or --postgres-url)", err)
					}
					if *sample > 0 && !*asJSON {
						if err := sleepCtx(ctx, *sample); err != nil {
							return err
						}
						prev := rep
						if rep, err = fetchReport(ctx, hc, status); err != nil {
							return err
						}
						rates = statusview.ActedRates(prev.Plugins, rep.Plugins, rep.At.Sub(prev.At))
					}
				default:
					rep, rates, err = keyspaceReport(ctx, env, &backendFlags{url: *url, conn: cf}, partitions, *statusFile, hc, *addr, *sample)
					if err != nil {
						return err
					}
				}
				if *asJSON {
					return printJSON(env.stdout, rep)
				}
				title := "fabric status"
				if rep.Backend != "" {
					title += " · " + rep.Backend
				}
				statusview.Render(env.stdout, statusview.Frame{Title: title, Now: rep.At, Report: rep, ActedPerSec: rates,
					Width: termWidth(env.stdout)})
				return nil
			}
		},
	})
}

// adminClient is the HTTP client of an admin server: the default one, or
// one trusting caFile's CAs for an https server with a private CA.
func adminClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--admin-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--admin-ca %s: no PEM certificate in it", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

// fetchReport GETs a running host's /status.
func fetchReport(ctx context.Context, hc *http.Client, url string) (admin.Report, error) {
	var rep admin.Report
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return rep, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return rep, fmt.Errorf("status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("status: GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return rep, fmt.Errorf("status: decode %s: %w", url, err)
	}
	return rep, nil
}

// keyspaceReport is censusReport on the Valkey deployment at b.url.
func keyspaceReport(ctx context.Context, env *cliEnv, b *backendFlags, parts *partitionsFlag, statusFile string, hc *http.Client, addr string, sample time.Duration) (admin.Report, map[string]float64, error) {
	b.logLevel, b.partitions = "error", parts.PartitionConfig
	conn, err := b.connect(ctx, env)
	if err != nil {
		return admin.Report{}, nil, err
	}
	defer conn.Close()
	return censusReport(ctx, admin.SamplerConfig{Backend: conn.Client, Logger: conn.Logger}, conn.Where, statusFile, hc, addr, sample)
}

// postgresReport is censusReport on the Postgres database at pg.url, read
// as `fabric run --backend postgres` reads it (admin.PGCensus) and named
// as it names it ("postgres: database URL", the password redacted). A
// database without fabric's schema is refused naming `fabric migrate`; no
// error or log line carries the password.
func postgresReport(ctx context.Context, env *cliEnv, pg *pgFlags, statusFile string, hc *http.Client, addr string, sample time.Duration) (admin.Report, map[string]float64, error) {
	s, err := pg.open(ctx, env)
	if err != nil {
		return admin.Report{}, nil, err
	}
	defer s.Close()
	rep, rates, err := censusReport(ctx, admin.SamplerConfig{Take: admin.PGCensus(s.Client), Logger: s.Log}, "postgres: "+s.Where, statusFile, hc, addr, sample)
	return rep, rates, s.redact(err)
}

// censusReport takes two censuses of the deployment sc samples, sample
// apart, and adds the plugins of a status file or of a reachable admin
// server, read at both censuses for their ACTED/S (nil rates when the
// plugins did not change between the reads, as a status file written
// before the sample); where names the deployment in the report.
func censusReport(ctx context.Context, sc admin.SamplerConfig, where, statusFile string, hc *http.Client, addr string, sample time.Duration) (admin.Report, map[string]float64, error) {
	// plugins reads the plugin list and when it was taken; unknown says
	// why there is none when no host answered.
	var unknown string
	plugins := func() ([]host.PluginStatus, time.Time, error) {
		if statusFile != "" {
			b, err := os.ReadFile(statusFile)
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("--status-file: %w", err)
			}
			var snap host.Snapshot
			if err := json.Unmarshal(b, &snap); err != nil {
				return nil, time.Time{}, fmt.Errorf("--status-file %s: %w", statusFile, err)
			}
			var rejected []host.FileStatus
			for _, f := range snap.Files {
				if f.State == host.StateInvalid {
					rejected = append(rejected, f)
				}
			}
			return append(snap.Plugins, admin.RejectedRows(rejected)...), snap.At, nil
		}
		rep, err := fetchReport(ctx, hc, strings.TrimSuffix(addr, "/")+"/status")
		if err != nil {
			unknown = "no host answered at " + redact.URL(addr) + "; the executions below are read from the backend directly; " +
				"give --admin of a running host or --status-file for its plugins"
			return nil, time.Time{}, nil
		}
		unknown = ""
		return rep.Plugins, rep.At, nil
	}
	prev, prevAt, err := plugins()
	if err != nil {
		return admin.Report{}, nil, err
	}
	s := admin.NewSampler(sc)
	s.Sample(ctx)
	cur, curAt := prev, prevAt
	if _, _, err := s.Latest(); err == nil && sample > 0 {
		if err := sleepCtx(ctx, sample); err != nil {
			return admin.Report{}, nil, err
		}
		s.Sample(ctx)
		if cur, curAt, err = plugins(); err != nil {
			return admin.Report{}, nil, err
		}
	}
	var src admin.PluginSource
	if cur != nil {
		src = staticPlugins(cur)
	}
	rep := admin.BuildReport(time.Now(), where, src, s)
	if cur == nil {
		rep.PluginsUnknown = unknown
	}
	if rep.Census == nil && rep.Error != "" {
		return rep, nil, errors.New(rep.Error)
	}
	return rep, statusview.ActedRates(prev, cur, curAt.Sub(prevAt)), nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// staticPlugins is a fixed plugin list read from elsewhere.
type staticPlugins []host.PluginStatus

func (p staticPlugins) Plugins() []host.PluginStatus { return p }

func (staticPlugins) Started() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
