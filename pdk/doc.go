// Package pdk is the plugin kit for fabric plugin authors: the Host
// interface a plugin calls, the Plugin it registers, the shared due-index
// scan skeleton, and (on GOOS=wasip1 only) the wasm exports and host
// imports that bind it to the fabric host through Extism.
//
// A scanner is a main package that registers itself in init:
//
//	func init() {
//		pdk.Register(pdk.Plugin{
//			Manifest: abi.Manifest{Name: "my_scanner", Version: "0.1.0", ...},
//			Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult { ... },
//		})
//	}
//
//	func main() {}
//
// and is built with the standard Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o my_scanner.wasm .
//
// # Notes
//
//   - Plugin logic talks to the host only through Host, so it also
//     compiles natively: unit-test it with pdktest.Host, an in-process fake
//     host, and benchmark it natively against the wasm build.
//   - Go's wasm scheduler runs only while the host is inside a call, so all
//     work must finish inside Scan; background goroutines make no progress
//     between calls.
//   - Time comes only from Host.Now (server time through the host's clock),
//     never from the time package, so replay stays deterministic.
package pdk
