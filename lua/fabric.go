package lua

import (
	"embed"
	"strings"
)

// FabricLibraryName is the name of fabric's own Functions library, loaded
// beside flowfabric and separate from it so a FlowFabric client sees
// exactly FlowFabric's function surface.
const FabricLibraryName = "fabric"

// FabricVersion is what fabric_version returns.
const FabricVersion = "7"

//go:embed fabric/*.lua
var fabricFiles embed.FS

// FabricSource returns the fabric library: the shebang line, then
// fabric/fabric.lua (which defines the helpers the others use), then every
// other fabric/*.lua file in name order, each behind a
// `-- source: lua/fabric/<file>` line.
func FabricSource() string {
	var b strings.Builder
	b.WriteString("#!lua name=" + FabricLibraryName + "\n")
	names := []string{"fabric.lua"}
	entries, err := fabricFiles.ReadDir("fabric")
	if err != nil {
		panic("lua: fabric/ is not embedded: " + err.Error())
	}
	for _, e := range entries { // ReadDir sorts by name
		if e.Name() != "fabric.lua" && strings.HasSuffix(e.Name(), ".lua") {
			names = append(names, e.Name())
		}
	}
	for i, name := range names {
		body, err := fabricFiles.ReadFile("fabric/" + name)
		if err != nil {
			panic("lua: fabric/" + name + " is not embedded: " + err.Error())
		}
		if i > 0 {
			b.WriteString("\n-- source: lua/fabric/" + name + "\n")
		}
		b.Write(body)
	}
	return b.String()
}
