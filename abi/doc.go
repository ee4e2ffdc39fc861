// Package abi is the contract between the fabric host and its WebAssembly
// plugins, the one source of truth both sides import: the ABI version and
// its compatibility rule, the manifest a plugin declares, the capabilities
// it requests (the operator grants them, see host.Grant), the table of host functions, the
// status codes of the error envelope, and the compact binary messages of the
// hot calls.
//
// The package depends only on the standard library and package model, so it
// compiles both for the host and for GOOS=wasip1 plugins.
//
// # Calls
//
// The host calls a plugin for a chunk of partitions per tick (or one
// partition per call), never once per item:
//
//	fabric_manifest() -> Manifest (binary, read once at load)
//	fabric_scan(ScanRequest) -> ScanResult
//	fabric_scan_batch(ScanBatchRequest) -> ScanBatchResult (ABI 1.2, optional)
//
// In a fabric_scan_batch call the plugin selects each partition with the
// partition host function before scanning it, so its host calls are
// checked against that partition alone, as in fabric_scan; or it selects
// PartitionWholeBatch once and scans them together (each key then on one
// of the batch's partitions), sharing its reads and FCALLs among them in
// pipelined batches (pdk.DueBatch).
//
// The plugin calls back through the host functions listed in HostFuncs, in
// module Namespace. Every pointer-taking host function takes one encoded
// request and returns one envelope: a status byte (a Code, CodeOK on
// success) followed by the response, or by an error message when the status
// is not CodeOK. Expected failures (a capability that was not granted, a
// backend error, a deadline) come back as envelopes; only ABI violations (a
// bad pointer) trap.
//
// # Notes
//
//   - Messages are length-prefixed varint encodings (see Encoder and
//     Decoder); there is no JSON on a per-item path. A manifest is binary on
//     the wire and JSON (snake_case, units in the names) for people.
//   - The binary encodings are part of the ABI: changing a message layout is
//     a major version bump; adding a host function is a minor one.
package abi
