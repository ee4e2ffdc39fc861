// Command abimismatch is a test plugin that declares ABI 2.0.0, a major
// this host does not speak.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{ABI: "2.0.0", Name: "abimismatch", Version: "1.0.0"},
		Scan:     func(pdk.Host, abi.ScanRequest) abi.ScanResult { return abi.ScanResult{} },
	})
}

func main() {}
