package admin

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/fabric-host/fabric/host"
)

// PluginDetailSource is a PluginSource that also answers one plugin's
// status and its recent cycles; *host.Host implements it.
type PluginDetailSource interface {
	Plugin(name string) (host.PluginStatus, bool)
	Records(name string) []host.CycleRecord
}

// PluginDetail is GET /api/plugins/{name}: the plugin's status (manifest
// fields, requested and granted capabilities, limits, totals, faults,
// swaps) and its recent cycles, newest first.
type PluginDetail struct {
	Plugin host.PluginStatus  `json:"plugin"`
	Cycles []host.CycleRecord `json:"cycles"`
}

// pluginCycles bounds the cycles a plugin detail shows.
const pluginCycles = 50

// PluginDetailHandler serves GET /api/plugins/{name} from src (404 when
// src is nil or does not know the plugin).
func PluginDetailHandler(src PluginSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		ds, ok := src.(PluginDetailSource)
		if src == nil || !ok {
			apiFail(w, fmt.Errorf("%w: plugin %q: this deployment runs no host", ErrNotFound, name))
			return
		}
		st, ok := ds.Plugin(name)
		if !ok {
			names := []string{}
			for _, p := range src.Plugins() {
				names = append(names, p.Name)
			}
			apiFail(w, fmt.Errorf("%w: unknown plugin %q (plugins: %s)", ErrNotFound, name, strings.Join(names, ", ")))
			return
		}
		recs := ds.Records(name)
		slices.Reverse(recs)
		if len(recs) > pluginCycles {
			recs = recs[:pluginCycles]
		}
		if recs == nil {
			recs = []host.CycleRecord{}
		}
		writeJSON(w, http.StatusOK, PluginDetail{Plugin: st, Cycles: recs})
	}
}
