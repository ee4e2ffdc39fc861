// Package admin is a fabric host's operations surface: the Prometheus
// metrics of its plugins, the keyspace sampler behind the lag and
// execution gauges, and the loopback admin HTTP server that serves them
// with health, readiness and plugin status.
//
//	m := admin.NewMetrics()
//	h, _ := host.New(host.Config{..., Observer: m})
//	s := admin.NewSampler(admin.SamplerConfig{Backend: client})
//	srv := admin.NewServer(admin.ServerConfig{Addr: "127.0.0.1:9480", Host: h, Backend: client, Sampler: s, Metrics: m})
//	if err := srv.Start(ctx); err != nil { ... }
//	defer srv.Stop()
//
// Every request's Host header must name the server (ServerConfig.Hosts,
// the loopback names, and any IP address on a bind that is not
// loopback), else it is answered 421: a DNS-rebinding page cannot read
// it. Idle keep-alive connections close after ServerConfig.IdleTimeout;
// headers, reads and writes have their own bounds (NewHTTPServer).
//
// # Endpoints
//
//   - /metrics: Prometheus text format (see Metrics for the series).
//   - /healthz: 200 while the backend answers PING, 503 otherwise.
//   - /readyz: 200 once the host finished its initial plugin load, the
//     backend answers and the flowfabric library is loaded; 503 otherwise.
//   - /plugins: the host's plugins, a JSON list of host.PluginStatus.
//   - /status: a Report (plugins, executions by state, lag, throughput),
//     what `fabric status` shows.
//   - /ui/: the operator console's web UI (embedded; / redirects there).
//
// # Operator console API
//
// JSON in, JSON out; the CLI verbs (fabric executions, flows, lanes,
// workers) and the web UI call these same routes. NewConsoleHandler
// serves them over a ConsoleBackend: Console (Valkey, mounted by Server)
// or PGConsole (Postgres: the same writes; the replay of a flow member
// that was skipped or has downstream members answers 501). Every error answers
// an APIError {"error": "...", "status": N}: 400 for a malformed id,
// state, limit, cursor or body; 404 for an unknown execution, flow, lane
// or route; 403 for a write without the admin token; 409 when the
// execution's state refuses the action (the error names FlowFabric's
// code, e.g. execution_not_eligible); 501 for what the backend cannot do.
//
//   - GET /api/executions?lane=&state=&flow=&limit=&cursor=&order= — an
//     ExecutionPage. state is a lane index (eligible, delayed, active,
//     suspended, terminal, blocked, blocked:<reason>) or a terminal
//     public state (completed, failed, cancelled, expired, skipped);
//     limit is 1..1000 (50); order=desc reverses the listing (terminal
//     newest first); next_cursor continues the listing.
//   - GET /api/executions/{id} — an ExecutionDetail: core fields,
//     payload and result previews, tags, policy, current lease, lease
//     history, attempts with their errors and stream frames, suspension,
//     waitpoints (never their tokens), flow membership.
//   - GET /api/flows/{id} — a FlowView: flow record, members with their
//     states, edges, counts per state.
//   - GET /api/lanes — {"lanes": [LaneCounts]}: per lane, counts per
//     lane index.
//   - GET /api/workers?namespace=default — {"workers": [WorkerInfo]}:
//     registered instances, lanes, capabilities, last heartbeat, leases.
//   - GET /api/plugins/{name} — a PluginDetail: the plugin's status
//     (manifest, requested and granted capabilities, limits, faults,
//     swaps) and its recent cycles.
//   - GET /api/throughput — {"points": [ThroughputPoint]}: the sampler's
//     last readings (404 without a sampler).
//
// Writes need "Authorization: Bearer <admin token>" (ServerConfig.
// AdminToken; `fabric run --admin-token-file`, admin_token_file in
// fabric.toml or FABRIC_ADMIN_TOKEN); without a configured token every
// write is refused. Each answers an ActionResult. A body is one JSON
// object of the fields shown: an unknown field or data after it is 400,
// a body over 1 MiB 413.
//
//   - POST /api/executions/{id}/cancel {"reason": "..."}: operator cancel.
//   - POST /api/executions/{id}/replay (or /retry): re-run a terminal one.
//   - POST /api/executions/{id}/priority {"priority": 0..9000}: eligible only.
//   - POST /api/executions/{id}/signal {"name": "...", "payload": optional
//     JSON text (none when absent), "waitpoint_id": optional,
//     "idempotency_key": optional}: the server supplies the waitpoint token.
//   - POST /api/lanes/{lane}/pause|resume: 501, FlowFabric keeps no lane
//     state on Valkey (see Console.SetLaneState).
package admin
