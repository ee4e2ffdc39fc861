package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
)

func init() {
	register(&command{
		name:    "plugins shadow",
		usage:   "FILE | --drop NAME",
		summary: "Run FILE as a shadow of the live plugin of its name on a running host: same partitions and sweeps, real reads, writes recorded and never sent, compared with what the live version did (needs the admin token).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, false)
			drop := fs.Bool("drop", false, "drop the shadow of the plugin NAME instead")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				what := "FILE"
				if *drop {
					what = "NAME"
				}
				arg, err := oneArg(args, what)
				if err != nil {
					return err
				}
				var a admin.ShadowAnswer
				if *drop {
					if _, err := c.do(ctx, http.MethodDelete, "/api/plugins/"+url.PathEscape(arg)+"/shadow", nil, &a); err != nil {
						return tokenHint(err)
					}
					fmt.Fprintf(env.stdout, "%s: shadow dropped; live %s\n", a.Plugin, a.Live)
					return nil
				}
				b, err := os.ReadFile(arg)
				if err != nil {
					return fmt.Errorf("read %s: %w", arg, err)
				}
				if _, err := c.do(ctx, http.MethodPost, "/api/plugins/shadow", b, &a); err != nil {
					return tokenHint(err)
				}
				if a.Shadow == nil {
					return fmt.Errorf("%s: the host answered without a shadow", a.Plugin)
				}
				fmt.Fprintf(env.stdout, "%s: shadow %s (%s) beside live %s; see `fabric plugins diff %s`\n", a.Plugin, a.Shadow.Version, short(a.Shadow.SHA256), a.Live, a.Plugin)
				return nil
			}
		},
	})
	register(&command{
		name:    "plugins diff",
		usage:   "NAME",
		summary: "Show how plugin NAME's shadow compares with its live version: agreeing and differing actions, sample differences.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, true)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				name, err := oneArg(args, "plugin name")
				if err != nil {
					return err
				}
				var st host.ShadowStatus
				if done, err := c.read(ctx, env, "/api/plugins/"+url.PathEscape(name)+"/shadow", &st); done || err != nil {
					return err
				}
				printShadow(env.stdout, name, st)
				return nil
			}
		},
	})
	for _, v := range []struct{ verb, summary string }{
		{"promote", "Make plugin NAME's shadow its live version at the next call boundary, keeping the version it replaces for a rollback (needs the admin token)."},
		{"rollback", "Make the version plugin NAME's last promotion replaced live again at the next call boundary; without one, admit the older signed file of NAME refused as a downgrade (needs the admin token)."},
	} {
		register(&command{
			name:    "plugins " + v.verb,
			usage:   "NAME",
			summary: v.summary,
			setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
				c := addConsoleFlags(fs, false)
				return func(ctx context.Context, env *cliEnv, args []string) error {
					args, err := positionals(fs, args)
					if err != nil {
						return err
					}
					name, err := oneArg(args, "plugin name")
					if err != nil {
						return err
					}
					var a admin.ShadowAnswer
					if _, err := c.do(ctx, http.MethodPost, "/api/plugins/"+url.PathEscape(name)+"/"+v.verb, nil, &a); err != nil {
						return tokenHint(err)
					}
					fmt.Fprintf(env.stdout, "%s: %s; live %s\n", a.Plugin, map[string]string{"promote": "promoted", "rollback": "rolled back"}[v.verb], a.Live)
					return nil
				}
			},
		})
	}
}

// tokenHint adds where the admin token comes from to a refusal.
func tokenHint(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusForbidden {
		return fmt.Errorf("%w; pass --admin-token-file or set %s", err, adminTokenEnv)
	}
	return err
}

// printShadow prints a shadow's comparison.
func printShadow(w io.Writer, name string, st host.ShadowStatus) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: shadow %s (%s) since %s\n", name, st.Version, short(st.SHA256), st.Since.UTC().Format("2006-01-02 15:04:05Z"))
	if st.Solo {
		b.WriteString("  the live version runs no sweeps: the shadow sweeps alone, every action it meant is one the live version did not take\n")
	}
	fmt.Fprintf(&b, "  calls    %d compared, %d agreeing, %d skipped, %d faults\n", st.Calls, st.AgreeingCalls, st.Skipped, st.Faults)
	fmt.Fprintf(&b, "  actions  %d agree, %d disagree (%d only live, %d only shadow), agreement %.1f %%\n", st.Agree, st.Disagree, st.OnlyLive, st.OnlyCandidate, 100*st.AgreeRatio())
	fmt.Fprintf(&b, "  writes   %d recorded and not sent\n", st.DryRuns)
	if st.LastError != "" {
		fmt.Fprintf(&b, "  last fault: %s\n", st.LastError)
	}
	if len(st.Samples) > 0 {
		fmt.Fprintf(&b, "  differences (latest %d; - only live, + only shadow):\n", len(st.Samples))
		for _, s := range st.Samples {
			sign := "+"
			if s.Side == "live" {
				sign = "-"
			}
			fmt.Fprintf(&b, "    %s %s %s\n", sign, s.Partition, s.Action)
		}
	}
	io.WriteString(w, b.String())
}
