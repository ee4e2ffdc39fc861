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
// # Endpoints
//
//   - /metrics: Prometheus text format (see Metrics for the series).
//   - /healthz: 200 while the backend answers PING, 503 otherwise.
//   - /readyz: 200 once the host finished its initial plugin load, the
//     backend answers and the flowfabric library is loaded; 503 otherwise.
//   - /plugins: the host's plugins, a JSON list of host.PluginStatus.
//   - /status: a Report (plugins, executions by state, lag, throughput),
//     what `fabric status` shows.
package admin
