package valkey

import (
	"context"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/lua"
)

// EnsureFabricLibrary makes sure the server runs the embedded fabric
// library (fabric's own functions, fabric_*), loading or replacing it when
// fabric_version is missing or answers another version; on a cluster, on
// every primary. EnsureLibrary calls it.
func (c *Client) EnsureFabricLibrary(ctx context.Context) error {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := ensureFabricLibraryOn(ctx, n.Client); err != nil {
			return c.onNode(n, err)
		}
	}
	return nil
}

func ensureFabricLibraryOn(ctx context.Context, node vk.Client) error {
	probe := func() (string, error) {
		return node.Do(ctx, node.B().Fcall().Function("fabric_version").Numkeys(0).Build()).ToString()
	}
	if got, err := probe(); err == nil && got == lua.FabricVersion {
		return nil
	}
	load := node.B().FunctionLoad().Replace().FunctionCode(lua.FabricSource()).Build()
	if err := node.Do(ctx, load).Error(); err != nil {
		return fmt.Errorf("valkey: FUNCTION LOAD fabric: %w", err)
	}
	got, err := probe()
	if err != nil {
		return fmt.Errorf("valkey: probe fabric_version after load: %w", err)
	}
	if got != lua.FabricVersion {
		return fmt.Errorf("valkey: fabric library version mismatch after load: expected %s, got %s", lua.FabricVersion, got)
	}
	return nil
}
