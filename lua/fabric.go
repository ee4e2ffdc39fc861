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
const FabricVersion = "4"

//go:embed fabric/*.lua
var fabricFiles embed.FS

// FabricSource returns the fabric library: the shebang line then
// fabric/fabric.lua.
func FabricSource() string {
	body, err := fabricFiles.ReadFile("fabric/fabric.lua")
	if err != nil {
		panic("lua: fabric/fabric.lua is not embedded: " + err.Error())
	}
	var b strings.Builder
	b.WriteString("#!lua name=" + FabricLibraryName + "\n")
	b.Write(body)
	return b.String()
}
