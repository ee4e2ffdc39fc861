package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/lua"
)

// EnsureFabricLibrary makes sure the server runs the embedded fabric
// library (fabric's own functions, fabric_*), loading or replacing it when
// fabric_version is missing or answers another version. EnsureLibrary
// calls it.
func (c *Client) EnsureFabricLibrary(ctx context.Context) error {
	probe := func() (string, error) {
		return c.c.Do(ctx, c.c.B().Fcall().Function("fabric_version").Numkeys(0).Build()).ToString()
	}
	if got, err := probe(); err == nil && got == lua.FabricVersion {
		return nil
	}
	load := c.c.B().FunctionLoad().Replace().FunctionCode(lua.FabricSource()).Build()
	if err := c.c.Do(ctx, load).Error(); err != nil {
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
