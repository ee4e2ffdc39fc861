package host_test

import (
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/pdk"
)

// NativeHost serves pdk plugins run natively (the host package itself does
// not import the plugin kit).
var _ pdk.Host = (*host.NativeHost)(nil)
