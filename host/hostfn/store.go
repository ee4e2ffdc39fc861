package hostfn

import (
	"github.com/fabric-host/fabric/backend"
)

// Store is the backend the host functions read and call through: plugin
// data in the ABI's types (backend.PluginData), implemented by the
// driver (backend/valkey.PluginStore), so hostfn names none. It may also
// be a CommandStore and a BatchReadStore.
type Store = backend.PluginData

// StoreOf is the Store of a backend client that serves plugin data
// (backend.PluginDataSource, as *valkey.Client does), nil for anything
// else. It lets the host default its Store without naming the driver.
func StoreOf(b any) Store {
	if s, ok := b.(backend.PluginDataSource); ok {
		return s.PluginData()
	}
	return nil
}
