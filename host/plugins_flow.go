package host

// FlowEnginePlugins names the flow engine's plugins `fabric run` should
// load besides DefaultPlugins, with Config.Completions.Enabled set so the
// dispatchers are driven by ff:dag:completions:
//
//   - dispatchers (plugins/dispatch/<name>): dependency (the router
//     cascade), edge_cancel (sibling cancel; also swept every 1 s);
//   - scanners (plugins/scanners/<name>), FlowFabric's intervals in their
//     manifests.
var FlowEnginePlugins = []string{
	"dependency",             // completions
	"edge_cancel",            // completions + 1 s sweep
	"dependency_reconciler",  // 15 s
	"flow_projector",         // 15 s
	"cancel_reconciler",      // 15 s
	"edge_cancel_reconciler", // 10 s
	"budget_reset",           // 15 s
	"budget_reconciler",      // 30 s
	"quota_reconciler",       // 30 s
}
