package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabric-host/fabric/internal/termsafe"
	"github.com/fabric-host/fabric/sdk"
)

// tagsFlag collects repeated --tag key=value flags.
type tagsFlag map[string]string

func (t tagsFlag) String() string { return "" }

func (t tagsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	t[k] = val
	return nil
}

// deploymentFlags name the deployment a schedule command works on: a
// Valkey one (--valkey-url and the connection flags) or a Postgres one
// (--postgres-url); schedules live in the deployment, so one is required.
type deploymentFlags struct {
	fs  *flag.FlagSet
	url *string
	cf  *connFlags
	pg  *pgFlags
}

func addDeploymentFlags(fs *flag.FlagSet) *deploymentFlags {
	return &deploymentFlags{fs: fs,
		url: fs.String("valkey-url", "", "the Valkey deployment (this or --postgres-url is required: schedules live in the deployment)"),
		cf:  addConnFlags(fs), pg: addPostgresFlags(fs)}
}

// client connects to the deployment and returns an SDK client on it
// (on Valkey, partition counts from ff:config:partitions; on Postgres,
// a database fabric migrate prepared).
func (d *deploymentFlags) client(ctx context.Context, env *cliEnv) (*sdk.Client, func(), error) {
	if (*d.url == "") == (d.pg.url == "") {
		return nil, nil, fmt.Errorf("%w: give one of --valkey-url and --postgres-url (schedules live in the deployment)", errUsage)
	}
	if err := d.pg.checkPasswordFile(d.fs); err != nil {
		return nil, nil, err
	}
	if d.pg.url != "" {
		return postgresSDKClient(ctx, env, d.pg)
	}
	return valkeySDKClient(ctx, env, *d.url, d.cf)
}

// valkeySDKClient is an SDK client on the Valkey deployment at url
// (partition counts from ff:config:partitions).
func valkeySDKClient(ctx context.Context, env *cliEnv, url string, cf *connFlags) (*sdk.Client, func(), error) {
	if url == "" {
		return nil, nil, fmt.Errorf("%w: --valkey-url is required (the setting lives in the deployment)", errUsage)
	}
	b := &backendFlags{url: url, conn: cf, logLevel: "error"}
	conn, err := b.connect(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: conn.Client, Logger: conn.Logger, Creator: "fabric-cli"})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return c, conn.Close, nil
}

// postgresSDKClient is an SDK client on the database at pg.url; errors
// and logs never carry its password.
func postgresSDKClient(ctx context.Context, env *cliEnv, pg *pgFlags) (*sdk.Client, func(), error) {
	s, err := pg.open(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: s.Client, Logger: s.Log, Creator: "fabric-cli"})
	if err != nil {
		s.Close()
		return nil, nil, s.redact(err)
	}
	return c, s.Close, nil
}

// usageIfInvalid turns the SDK's input validation errors into usage
// errors (exit 2).
func usageIfInvalid(err error) error {
	if errors.Is(err, sdk.ErrInvalidInput) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

func init() {
	register(&command{
		name:    "periodic add",
		usage:   "NAME",
		summary: "Add (or replace) a periodic schedule: the periodic plugin of the running hosts creates one execution of --kind per tick (--every or --cron, UTC).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			dep := addDeploymentFlags(fs)
			every := fs.Duration("every", 0, "fixed interval between ticks (at least 100ms)")
			cronExpr := fs.String("cron", "", `5-field cron expression or descriptor, in UTC (e.g. "*/5 * * * *", "@hourly")`)
			kind := fs.String("kind", "", "execution kind of the created executions (required)")
			lane := fs.String("lane", sdk.DefaultLane, "lane of the created executions")
			payload := fs.String("payload", "", "payload of the created executions")
			priority := fs.Int("priority", 0, "claim priority 0..9000")
			retries := fs.Int("max-retries", 0, "retries after a failed attempt")
			timeout := fs.Duration("attempt-timeout", 0, "bound on one attempt (0: none)")
			caps := fs.String("capabilities", "", "comma-separated capabilities a worker must advertise")
			tags := tagsFlag{}
			fs.Var(tags, "tag", "key=value tag of the created executions (repeatable)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want exactly one schedule NAME", errUsage)
				}
				opts := []sdk.EnqueueOption{sdk.WithLane(*lane), sdk.WithPriority(*priority)}
				if *retries != 0 {
					opts = append(opts, sdk.WithRetry(*retries, sdk.Backoff{}))
				}
				if *timeout != 0 {
					opts = append(opts, sdk.WithAttemptTimeout(*timeout))
				}
				if *caps != "" {
					opts = append(opts, sdk.WithCapabilities(strings.Split(*caps, ",")...))
				}
				if len(tags) > 0 {
					opts = append(opts, sdk.WithTags(tags))
				}
				p := sdk.Periodic{Name: args[0], Every: *every, Cron: *cronExpr, Kind: *kind, Payload: []byte(*payload)}
				c, done, err := dep.client(ctx, env)
				if err != nil {
					return err
				}
				defer done()
				info, err := c.AddPeriodic(ctx, p, opts...)
				if err != nil {
					return usageIfInvalid(err)
				}
				termsafe.Strings(&info)
				fmt.Fprintf(env.stdout, "periodic %s: %s on lane %s, first tick %s\n", info.Name, info.Kind, info.Lane,
					info.NextDue.UTC().Format(time.RFC3339Nano))
				return nil
			}
		},
	})
	register(&command{
		name:    "periodic remove",
		usage:   "NAME",
		summary: "Remove a periodic schedule (executions it created are kept); exit 1 if there is none of that name.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			dep := addDeploymentFlags(fs)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want exactly one schedule NAME", errUsage)
				}
				c, done, err := dep.client(ctx, env)
				if err != nil {
					return err
				}
				defer done()
				if err := c.RemovePeriodic(ctx, args[0]); err != nil {
					return usageIfInvalid(err)
				}
				fmt.Fprintf(env.stdout, "periodic %s removed\n", termsafe.String(args[0]))
				return nil
			}
		},
	})
	register(&command{
		name:    "periodic list",
		summary: "List the periodic schedules: timing, kind, lane, next and last tick.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			dep := addDeploymentFlags(fs)
			asJSON := fs.Bool("json", false, "print the schedules as JSON")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				c, done, err := dep.client(ctx, env)
				if err != nil {
					return err
				}
				defer done()
				list, err := c.ListPeriodic(ctx)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(env.stdout, list)
				}
				termsafe.Strings(&list) // names, kinds and lanes read from the deployment
				if len(list) == 0 {
					fmt.Fprintln(env.stdout, "no periodic schedules")
					return nil
				}
				tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tTIMING\tKIND\tLANE\tNEXT TICK (UTC)\tLAST TICK (UTC)\tLAST EXECUTION")
				for _, p := range list {
					timing := p.Cron
					if timing == "" {
						timing = "every " + p.Every.String()
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, timing, p.Kind, p.Lane,
						stamp(p.NextDue), stamp(p.LastTick), cmpOr(string(p.LastExecutionID), "-"))
				}
				return tw.Flush()
			}
		},
	})
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
