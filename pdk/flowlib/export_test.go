package flowlib

// ResetSortRefusal forgets a refused SORT_RO (sortRefused), for tests that
// run both read paths in one process.
func ResetSortRefusal() { sortRefused.Store(false) }
