// Package lua embeds FlowFabric's Valkey Functions library, `flowfabric`, as
// fabric implements it, and assembles it into the exact source that is
// loaded with FUNCTION LOAD.
//
// The library is written as one file per family (helpers, version, lease,
// execution, ...) and concatenated in a fixed order behind the
// `#!lua name=flowfabric` shebang. fabric's own server-side additions, if
// any, live in a separate library so a FlowFabric client sees exactly
// FlowFabric's function surface.
package lua

import (
	"embed"
	"strings"
	"sync"
)

// LibraryName is the Functions library name FlowFabric clients call into.
const LibraryName = "flowfabric"

// Version is what ff_version returns; it is FlowFabric's library version 34.
const Version = "34"

// BuildMarker is the line fabric writes after the shebang of the library
// it loads. A server whose flowfabric library answers this Version but
// whose code differs is reloaded only when its code carries this line (an
// older fabric body); FlowFabric's own library of the same version is left
// as it is.
const BuildMarker = "-- built by fabric from lua/*.lua"

// Files lists the family files in load order. helpers.lua defines the
// library-local helpers every later file uses.
var Files = []string{
	"helpers.lua", "version.lua", "lease.lua", "execution.lua", "scheduling.lua",
	"suspension.lua", "signal.lua", "stream.lua", "budget.lua", "quota.lua", "flow.lua",
}

//go:embed *.lua
var files embed.FS

var (
	sourceOnce sync.Once
	source     string
)

// Source returns the assembled library: the shebang line, BuildMarker, then each family
// file present in Files order, each behind a `-- source: lua/<file>` line.
// The result is deterministic and is exactly what the loader sends.
func Source() string {
	sourceOnce.Do(func() {
		var b strings.Builder
		b.WriteString("#!lua name=" + LibraryName + "\n" + BuildMarker + "\n")
		for _, name := range Files {
			body, err := files.ReadFile(name)
			if err != nil {
				continue // family not implemented yet
			}
			b.WriteString("-- source: lua/" + name + "\n")
			b.Write(body)
			if len(body) > 0 && body[len(body)-1] != '\n' {
				b.WriteByte('\n')
			}
			b.WriteByte('\n')
		}
		source = b.String()
	})
	return source
}

// Functions lists the ff_* functions registered by the assembled source, in
// source order.
func Functions() []string {
	var out []string
	for _, line := range strings.Split(Source(), "\n") {
		line = strings.TrimSpace(line)
		const p = "redis.register_function('"
		if strings.HasPrefix(line, p) {
			rest := line[len(p):]
			if i := strings.IndexByte(rest, '\''); i > 0 {
				out = append(out, rest[:i])
			}
		}
	}
	return out
}
