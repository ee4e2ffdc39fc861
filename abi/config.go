package abi

// Config keys of the host–plugin contract: the host reads ConfigWake from
// a plugin's manifest and sets the others in the config it hands the
// plugin (pdk re-exports them under the same names for plugin authors).
const (
	// ConfigWake is the manifest config key naming the index-key globs
	// whose ZADDs wake a partition early when the host runs due-time
	// timers (comma-separated, path.Match syntax, e.g.
	// "ff:idx:*:lane:*:delayed").
	ConfigWake = "fabric.wake"
	// ConfigNextDue is the config key the host sets to "1" when it runs
	// due-time timers: a due-index scanner then reports the earliest
	// not-yet-due score it saw as ScanResult.NextDueMs.
	ConfigNextDue = "fabric.next_due"
	// ConfigBudgetPartitions and ConfigQuotaPartitions are the config
	// keys carrying the deployment's budget and quota partition counts.
	ConfigBudgetPartitions = "budget_partitions"
	ConfigQuotaPartitions  = "quota_partitions"
)
