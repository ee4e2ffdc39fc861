package hostfn

import (
	"github.com/fabric-host/fabric/internal/hostseam"
)

// Store is the backend the host functions read and call through: plugin
// data in the ABI's types (hostseam.PluginData), implemented by the
// driver (backend/valkey.PluginStore), so hostfn names none. It may also
// be a CommandStore and a BatchReadStore.
type Store = hostseam.PluginData

// StoreOf is the Store of a backend client that serves plugin data
// (hostseam.PluginDataSource, as *valkey.Client does), nil for anything
// else. It lets the host default its Store without naming the driver.
func StoreOf(b any) Store {
	if s, ok := b.(hostseam.PluginDataSource); ok {
		return s.PluginData()
	}
	return nil
}
