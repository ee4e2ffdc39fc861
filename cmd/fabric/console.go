package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/termsafe"
	"github.com/fabric-host/fabric/model"
)

// The operator console verbs: each is a thin client of a running host's
// admin API (/api, internal/admin/console_api.go), the same routes the
// web UI calls.

// consoleFlags are the flags every console verb shares.
type consoleFlags struct {
	addr      *string
	ca        *string
	tokenFile *string
	asJSON    *bool
}

func addConsoleFlags(fs *flag.FlagSet, read bool) *consoleFlags {
	c := &consoleFlags{addr: fs.String("admin", "http://"+admin.ServerAddrDefault, "admin server of a running host (fabric run prints it)"),
		ca: fs.String("admin-ca", "", "PEM CA that signs an https --admin server's certificate (default: the system's roots)")}
	if read {
		c.asJSON = fs.Bool("json", false, "print the API's JSON answer")
	} else {
		c.tokenFile = fs.String("admin-token-file", "", "file whose first line is the host's admin token (default $"+adminTokenEnv+")")
	}
	return c
}

// apiError is an error answer of the admin API.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.msg, e.status) }

// do calls the admin API and decodes its JSON answer into out; the body
// is returned too for --json.
func (c *consoleFlags) do(ctx context.Context, method, path string, body any, out any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rd io.Reader
	ctype := "application/json"
	if raw, ok := body.([]byte); ok { // a file uploaded as it is
		rd, ctype = bytes.NewReader(raw), "application/octet-stream"
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimSuffix(*c.addr, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: --admin %q: %v", errUsage, *c.addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	sentToken := false
	if c.tokenFile != nil {
		tok, err := readAdminToken(*c.tokenFile)
		if err != nil {
			return nil, err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
			sentToken = true
		}
	}
	hc, err := adminClient(*c.ca)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		// *url.Error repeats method and URL: say them once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s %s: %w (is `fabric run` running? pass --admin, and --admin-ca for a private CA)", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e admin.APIError
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		if resp.StatusCode == http.StatusForbidden && c.tokenFile != nil && !sentToken && strings.HasPrefix(e.Error, "admin token required") {
			e.Error += " (pass --admin-token-file F, or set $" + adminTokenEnv + ", with the token the host was started with)"
		}
		return nil, &apiError{status: resp.StatusCode, msg: termsafe.String(e.Error)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode: %w", method, u, err)
		}
		// Kinds, errors, tags, payloads: the answer is printed, escaped.
		termsafe.Strings(out)
	}
	return termsafe.JSON(b), nil
}

// read GETs path; with --json it prints the answer and returns done.
func (c *consoleFlags) read(ctx context.Context, env *cliEnv, path string, out any) (done bool, err error) {
	b, err := c.do(ctx, http.MethodGet, path, nil, out)
	if err != nil {
		return false, err
	}
	if *c.asJSON {
		_, err = env.stdout.Write(b)
		return true, err
	}
	return false, nil
}

// positionals parses flags given after positional arguments too
// ("show ID --json"), which flag.Parse alone leaves as arguments.
func positionals(fs *flag.FlagSet, args []string) ([]string, error) {
	var out []string
	for len(args) > 0 {
		if strings.HasPrefix(args[0], "-") && args[0] != "-" {
			if err := fs.Parse(args); err != nil {
				return nil, fmt.Errorf("%w: %v", errUsage, err)
			}
			args = fs.Args()
			continue
		}
		out = append(out, args[0])
		args = args[1:]
	}
	return out, nil
}

func oneArg(args []string, what string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("%w: want one %s, got %d arguments", errUsage, what, len(args))
	}
	return args[0], nonEmpty(args[0], what)
}

// nonEmpty refuses an empty (or blank) argument as a usage error: it
// would otherwise name no resource (GET /api/executions/).
func nonEmpty(arg, what string) error {
	if strings.TrimSpace(arg) == "" {
		return fmt.Errorf("%w: the %s is empty", errUsage, what)
	}
	return nil
}

func msTime(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05")
}

func msField(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return msTime(n)
}

func init() {
	register(&command{
		name:    "executions list",
		summary: "List executions of a running host (by lane, state, flow; paged with --cursor).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, true)
			lane := fs.String("lane", "", "only this lane")
			state := fs.String("state", "", "only this state: "+strings.Join(admin.ListStates(), ", "))
			flow := fs.String("flow", "", "only the members of this flow")
			limit := fs.Int("limit", 50, "page size (1..1000)")
			cursor := fs.String("cursor", "", "continue from a previous page's next cursor")
			desc := fs.Bool("desc", false, "reverse order (terminal executions newest first); keep it when paging")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				if err := noArgs(args); err != nil {
					return err
				}
				q := url.Values{"limit": {strconv.Itoa(*limit)}}
				if *desc {
					q.Set("order", "desc")
				}
				for k, v := range map[string]string{"lane": *lane, "state": *state, "flow": *flow, "cursor": *cursor} {
					if v != "" {
						q.Set(k, v)
					}
				}
				var p admin.ExecutionPage
				if done, err := c.read(ctx, env, "/api/executions?"+q.Encode(), &p); done || err != nil {
					return err
				}
				tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tLANE\tSTATE\tKIND\tPRIO\tATTEMPTS\tCREATED")
				for _, r := range p.Executions {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, r.Lane, r.State, r.Kind, r.Priority, r.Attempts, msTime(r.CreatedAt))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if p.NextCursor != "" {
					fmt.Fprintf(env.stdout, "more: --cursor %s\n", p.NextCursor)
				}
				return nil
			}
		},
	})
	register(&command{
		name:    "executions show",
		usage:   "ID",
		summary: "Show one execution: core fields, payload preview, attempts with errors, lease history, stream frames, waitpoints, flow.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, true)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				id, err := oneArg(args, "execution id")
				if err != nil {
					return err
				}
				var d admin.ExecutionDetail
				if done, err := c.read(ctx, env, "/api/executions/"+url.PathEscape(id), &d); done || err != nil {
					return err
				}
				printDetail(env.stdout, &d)
				return nil
			}
		},
	})
	register(&command{
		name:    "executions cancel",
		usage:   "ID",
		summary: "Cancel an execution as an operator (needs the admin token).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, false)
			reason := fs.String("reason", "operator_cancel", "cancellation reason stored on the execution")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				return c.action(ctx, env, args, "cancel", map[string]any{"reason": *reason})
			}
		},
	})
	for _, name := range []string{"replay", "retry"} {
		register(&command{
			name:    "executions " + name,
			usage:   "ID",
			summary: "Re-run a terminal execution (FlowFabric's replay; needs the admin token).",
			setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
				c := addConsoleFlags(fs, false)
				return func(ctx context.Context, env *cliEnv, args []string) error {
					args, err := positionals(fs, args)
					if err != nil {
						return err
					}
					return c.action(ctx, env, args, "replay", nil)
				}
			},
		})
	}
	register(&command{
		name:    "executions priority",
		usage:   "ID PRIORITY",
		summary: "Change an eligible execution's priority, 0..9000 (needs the admin token).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, false)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 2 {
					return fmt.Errorf("%w: want ID PRIORITY", errUsage)
				}
				p, err := strconv.Atoi(args[1])
				if err != nil {
					return fmt.Errorf("%w: priority %q is not a number", errUsage, args[1])
				}
				return c.action(ctx, env, args[:1], "priority", map[string]any{"priority": p})
			}
		},
	})
	register(&command{
		name:    "executions signal",
		usage:   "ID NAME",
		summary: "Deliver a signal to a suspended execution's waitpoint (needs the admin token).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, false)
			payload := fs.String("payload", "", "signal payload (JSON; default none: the resumed worker's ResumeSignal.Payload is nil)")
			wp := fs.String("waitpoint", "", "waitpoint id (default the execution's current one)")
			idem := fs.String("idempotency-key", "", "deduplicate deliveries per waitpoint")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 2 {
					return fmt.Errorf("%w: want ID NAME", errUsage)
				}
				if err := nonEmpty(args[1], "signal name"); err != nil {
					return err
				}
				return c.action(ctx, env, args[:1], "signal", admin.SignalRequest{Name: args[1], Payload: *payload,
					WaitpointID: *wp, IdempotencyKey: *idem})
			}
		},
	})
	register(&command{
		name:    "flows show",
		usage:   "ID",
		summary: "Show a flow's DAG as text: members with their states, edges.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, true)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				id, err := oneArg(args, "flow id")
				if err != nil {
					return err
				}
				var f admin.FlowView
				if done, err := c.read(ctx, env, "/api/flows/"+url.PathEscape(id), &f); done || err != nil {
					return err
				}
				printFlow(env.stdout, &f)
				return nil
			}
		},
	})
	register(&command{
		name:    "lanes",
		summary: "Count a running host's executions per state per lane.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, true)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				if err := noArgs(args); err != nil {
					return err
				}
				var l struct{ Lanes []admin.LaneCounts }
				if done, err := c.read(ctx, env, "/api/lanes", &l); done || err != nil {
					return err
				}
				tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintln(tw, "LANE\tELIGIBLE\tDELAYED\tACTIVE\tSUSPENDED\tBLOCKED\tTERMINAL\tTOTAL\tPARTITIONER\tPARTITIONS\tPER NODE\t")
				for _, ln := range l.Lanes {
					var blocked int64
					for k, n := range ln.Counts {
						if strings.HasPrefix(k, "blocked:") {
							blocked += n
						}
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t\n", ln.Lane, ln.Counts["eligible"], ln.Counts["delayed"],
						ln.Counts["active"], ln.Counts["suspended"], blocked, ln.Counts["terminal"], ln.Total,
						partitionerText(ln), ln.Partitions, perNodeText(ln.Nodes))
				}
				return tw.Flush()
			}
		},
	})
	for _, a := range []string{"pause", "resume"} {
		register(&command{
			name:    "lanes " + a,
			usage:   "LANE",
			summary: "Ask the host to " + a + " a lane (refused: FlowFabric keeps no lane state on Valkey).",
			setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
				c := addConsoleFlags(fs, false)
				return func(ctx context.Context, env *cliEnv, args []string) error {
					args, err := positionals(fs, args)
					if err != nil {
						return err
					}
					lane, err := oneArg(args, "lane")
					if err != nil {
						return err
					}
					_, err = c.do(ctx, http.MethodPost, "/api/lanes/"+url.PathEscape(lane)+"/"+a, nil, nil)
					return err
				}
			},
		})
	}
	register(&command{
		name:    "workers",
		summary: "List a running host's registered workers: lanes, capabilities, last heartbeat, leases held.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			c := addConsoleFlags(fs, true)
			ns := fs.String("namespace", "default", "worker registry namespace")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				if err := noArgs(args); err != nil {
					return err
				}
				var w struct{ Workers []admin.WorkerInfo }
				if done, err := c.read(ctx, env, "/api/workers?namespace="+url.QueryEscape(*ns), &w); done || err != nil {
					return err
				}
				tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "INSTANCE\tWORKER\tALIVE\tLANES\tCAPABILITIES\tLAST HEARTBEAT\tLEASES")
				for _, x := range w.Workers {
					fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%d\n", x.InstanceID, x.WorkerID, x.Alive, strings.Join(x.Lanes, ","),
						strings.Join(x.Capabilities, ","), msTime(x.LastHeartbeatMs), x.Leases)
				}
				return tw.Flush()
			}
		},
	})
}

// action POSTs an execution action and prints what it did.
func (c *consoleFlags) action(ctx context.Context, env *cliEnv, args []string, action string, body any) error {
	id, err := oneArg(args, "execution id")
	if err != nil {
		return err
	}
	var r admin.ActionResult
	if _, err := c.do(ctx, http.MethodPost, "/api/executions/"+url.PathEscape(id)+"/"+action, body, &r); err != nil {
		return err
	}
	keys := make([]string, 0, len(r.Detail))
	for k := range r.Detail {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, r.Detail[k])
	}
	fmt.Fprintf(env.stdout, "%s %s: %s\n", action, r.ID, strings.Join(parts, " "))
	return nil
}

func printFields(w io.Writer, indent string, m map[string]string, keys ...string) {
	if len(keys) == 0 {
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	for _, k := range keys {
		v, ok := m[k]
		if !ok || v == "" {
			continue
		}
		if strings.HasSuffix(k, "_at") || strings.HasSuffix(k, "_ms") || k == "ts" {
			v = msField(v)
		}
		fmt.Fprintf(w, "%s%s: %s\n", indent, k, v)
	}
}

func printDetail(w io.Writer, d *admin.ExecutionDetail) {
	fmt.Fprintf(w, "execution %s\n", d.ID)
	printFields(w, "  ", d.Core, "public_state", "lane_id", "execution_kind", "namespace", "priority", "lifecycle_phase",
		"ownership_state", "eligibility_state", "attempt_state", "blocking_reason", "blocking_detail", "total_attempt_count",
		"retry_count", "replay_count", "created_at", "started_at", "completed_at", "delay_until", "failure_reason",
		"cancellation_reason", "flow_id", "current_worker_instance_id", "lease_expires_at")
	fmt.Fprintf(w, "payload (%d bytes): %s\n", d.PayloadBytes, d.Payload)
	if d.ResultBytes > 0 {
		fmt.Fprintf(w, "result (%d bytes): %s\n", d.ResultBytes, d.Result)
	}
	fmt.Fprintf(w, "attempts: %d\n", len(d.Attempts))
	for _, a := range d.Attempts {
		fmt.Fprintf(w, "  #%d %s %s → %s", a.Index, a.Fields["attempt_state"], msField(a.Fields["started_at"]), msField(a.Fields["ended_at"]))
		if a.Error != "" {
			fmt.Fprintf(w, " error: %s", a.Error)
		}
		fmt.Fprintln(w)
		for _, f := range a.Frames {
			fmt.Fprintf(w, "    frame %s %s %s\n", f.ID, f.Fields["frame_type"], f.Fields["payload"])
		}
	}
	fmt.Fprintf(w, "lease history: %d events\n", len(d.LeaseHistory))
	for _, f := range d.LeaseHistory {
		fmt.Fprintf(w, "  %s %s %s %s\n", msField(f.Fields["ts"]), f.Fields["event"], f.Fields["worker_id"], f.Fields["reason"])
	}
	if sus := d.Suspension; sus["suspension_id"] != "" && sus["closed_at"] == "" {
		// What a suspended execution waits for: the condition names its
		// signals (or waitpoints), the timeout when it gives up.
		fmt.Fprintf(w, "suspension %s: reason %s, timeout %s", sus["suspension_id"], cmp.Or(sus["reason_code"], "-"), cmp.Or(msField(sus["timeout_at"]), "none"))
		if b := sus["timeout_behavior"]; b != "" && sus["timeout_at"] != "" {
			fmt.Fprintf(w, " (then %s)", b)
		}
		fmt.Fprintf(w, "\n  waits for %s\n", cmp.Or(sus["resume_condition_json"], "-"))
	}
	if len(d.Waitpoints) > 0 {
		fmt.Fprintf(w, "waitpoints: %d\n", len(d.Waitpoints))
		for _, wp := range d.Waitpoints {
			fmt.Fprintf(w, "  %s state=%s signals=%s\n", wp.ID, wp.Fields["state"], wp.Fields["signal_count"])
		}
	}
	if d.Flow != nil {
		fmt.Fprintf(w, "flow %s: %d upstream edges\n", d.Flow.FlowID, len(d.Flow.Upstream))
		for _, e := range d.Flow.Upstream {
			fmt.Fprintf(w, "  after %s (%s)\n", e["upstream_execution_id"], e["state"])
		}
	}
}

func printFlow(w io.Writer, f *admin.FlowView) {
	state := flowState(f)
	if rec := f.Core["public_flow_state"]; rec != "" && rec != state {
		state += " (flow record: " + rec + ")"
	}
	fmt.Fprintf(w, "flow %s kind=%s state=%s members=%d edges=%d\n", f.ID, f.Core["flow_kind"], state,
		len(f.Nodes), len(f.Edges))
	nodes := topoOrder(f)
	short := map[string]string{}
	for i, n := range nodes {
		short[n.ID] = fmt.Sprintf("n%d", i+1)
	}
	fmt.Fprintln(w, "members (parents first):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range nodes {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", short[n.ID], n.State, n.Kind, n.ID)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "edges:")
	edges := append([]admin.FlowEdge{}, f.Edges...)
	sort.SliceStable(edges, func(i, j int) bool {
		return short[edges[i].Upstream]+short[edges[i].Downstream] < short[edges[j].Upstream]+short[edges[j].Downstream]
	})
	for _, e := range edges {
		fmt.Fprintf(w, "  %s -> %s (%s, %s)\n", short[e.Upstream], short[e.Downstream], e.Kind, cmp.Or(e.Resolution, e.State))
	}
}

// flowState is the state of a flow as its members tell it, derived as
// the flow projector derives it: failed or completed once every member
// is terminal. FlowFabric's flow record only ever says open or
// cancelled, and the projector's summary lags its members (or is
// missing when no host runs it); a cancelled record wins.
func flowState(f *admin.FlowView) string {
	rec := f.Core["public_flow_state"]
	counts := map[string]int{}
	for _, n := range f.Nodes {
		counts[n.State]++
	}
	bad := counts[model.PublicFailed] + counts[model.PublicCancelled] + counts[model.PublicExpired]
	done := bad + counts[model.PublicCompleted] + counts[model.PublicSkipped]
	switch {
	case rec == model.PublicCancelled:
		return rec
	case len(f.Nodes) > 0 && done == len(f.Nodes) && bad > 0:
		return model.PublicFailed
	case len(f.Nodes) > 0 && done == len(f.Nodes):
		return model.PublicCompleted
	}
	return cmp.Or(f.SummaryState, rec)
}

// topoOrder orders a flow's members parents first (by depth, then id);
// members on a cycle or with unknown parents come last.
func topoOrder(f *admin.FlowView) []admin.ExecutionRow {
	parents := map[string][]string{}
	for _, e := range f.Edges {
		parents[e.Downstream] = append(parents[e.Downstream], e.Upstream)
	}
	depth := map[string]int{}
	var walk func(id string, seen map[string]bool) int
	walk = func(id string, seen map[string]bool) int {
		if d, ok := depth[id]; ok {
			return d
		}
		if seen[id] {
			return len(f.Nodes)
		}
		seen[id] = true
		d := 0
		for _, p := range parents[id] {
			d = max(d, walk(p, seen)+1)
		}
		depth[id] = d
		return d
	}
	for _, n := range f.Nodes {
		walk(n.ID, map[string]bool{})
	}
	out := append([]admin.ExecutionRow{}, f.Nodes...)
	sort.SliceStable(out, func(i, j int) bool {
		if depth[out[i].ID] != depth[out[j].ID] {
			return depth[out[i].ID] < depth[out[j].ID]
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// partitionerText renders a lane's solo partitioner for fabric lanes:
// "crc16", or "spread/K" for a lane spread over K partitions.
func partitionerText(ln admin.LaneCounts) string {
	if ln.Partitioner == "spread" {
		return fmt.Sprintf("spread/%d", ln.SpreadPartitions)
	}
	return cmp.Or(ln.Partitioner, "-")
}

// perNodeText renders executions per node, nodes sorted: "host:port=n ...".
func perNodeText(nodes map[string]int64) string {
	if len(nodes) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(nodes))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, nodes[k])
	}
	return strings.Join(parts, " ")
}
