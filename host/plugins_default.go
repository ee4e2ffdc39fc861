package host

// DefaultPlugins names the plugins `fabric run` loads by default: FlowFabric's
// execution scanners, each a .wasm built from plugins/scanners/<name> into
// bin/plugins/<name>.wasm (scripts/build-plugins.sh), with the engine's
// default intervals in their manifests (overridable per plugin in
// Config.Plugins).
var DefaultPlugins = []string{
	"lease_expiry",       // 1.5 s
	"delayed_promoter",   // 750 ms
	"index_reconciler",   // 45 s
	"attempt_timeout",    // 2 s
	"suspension_timeout", // 2 s
	"pending_wp_expiry",  // 5 s
	"retention_trimmer",  // 60 s
	"unblock",            // 5 s
	"execution_deadline", // 5 s
	"periodic",           // 1 s; fabric's periodic schedules (timers wake it on the due tick)
}
