// Package host runs fabric's background machinery as WebAssembly plugins:
// it watches a directory of *.wasm files, validates and compiles each one
// (on wazero, with the Extism host ABI in Go, package env, and a directory
// compilation cache), drives every scanner with one generic loop, isolates
// faults, and hot-swaps a plugin when a new version of its file appears.
//
// # Lifecycle of a file
//
//  1. Debounce: a file must be quiet for Config.Debounce after its last
//     write event.
//  2. Static check, before compiling: wasm framing (a truncated or corrupt
//     file stops here), sha256 (and the pinned digest, if any), the
//     required exports, and imports of fabric host functions this host has.
//     With Config.TrustedKeys, a detached signature NAME.wasm.sig
//     (signature.go) is checked against the digest before any of the
//     file's code runs; RequireSigned refuses a file without one.
//  3. Compile (cached by content), warm one instance, read fabric_manifest
//     and validate it, including the ABI handshake (abi.ErrVersionMismatch)
//     and, for a signed file, that it declares the signed manifest. The
//     file must be named after the plugin it declares (NAME.wasm for NAME,
//     ErrNameMismatch; identity.go).
//  4. Grant (grant.go): the manifest only requests; Config.Policy grants.
//     A grant bound to digests or signers (Grant.SHA256, Signers) goes
//     only to the files it names; another file gets the Default alone.
//     A request beyond the plugin's grant (an FCALL, a key family read or
//     written, a SQL statement, cross_partition, max_pages, timeout_ms) is
//     refused with the exact difference (ErrNotGranted). The plugin then
//     runs under its Limits: memory, call timeout, output size and budgets
//     from the grant. A plugin whose memory cap differs from the default is
//     recompiled under it (a cache hit).
//  5. Install: a new name starts its loop; a signed file older than the
//     newest version run of its plugin is refused (ErrDowngrade) until
//     Rollback admits it; a new version of a known name is
//     swapped in atomically, so the next partition call uses it and the
//     call in flight finishes on the old version, which is closed after.
//     A file that fails any step is recorded (Files) and never replaces a
//     working plugin.
//
// # The loop
//
// One loop type drives every scanner from its LoopSpec (interval, batch
// size, timeout, partitions), re-read at every sweep: an initial tick, then
// the partitions in order, up to Config.PartitionsPerCall per call
// (fabric_scan_batch; one per call for plugins without it), start to start
// every interval. Each call waits for its turn (the scheduler of fair.go:
// MaxCalls healthy calls at once; plugins on probation, whose last call
// faulted, share ProbationCalls behind every healthy call and are cut
// sooner), then gets its own deadline (its timeout — of CPU time with a
// wall cap once the plugin returned — and its leases' deadline:
// deadline.go); a call that faults (FaultKind:
// trap, plugin error, timeout, over memory, over output, over budget, bad
// output) quarantines only its plugin for 2^n × base ±10 % (n counts
// consecutive quarantines and restarts after 7), while every other plugin
// keeps its cadence. A new
// version written over a quarantined plugin starts with a clean record.
//
// # Limits
//
// The host enforces a plugin's effective Limits (from its Grant): the
// memory cap at compile, each linear memory its own mapping unmapped when
// the instance is discarded (memory.go); the output's size is read before
// its bytes (call.go); host calls and backend commands are metered per
// sweep and per second (abi.CodeBudget, then an over-budget fault). A file that fails to load is listed by Rejected with a
// RejectReason until it is removed or fixed. Items whose FCALL keeps failing are skipped by
// the plugin's FailureTracker (3 failures, 10 sweeps), applied host-side in
// the fcall host function. Every partition scanned leaves a CycleRecord.
//
// # Partition leases
//
// With a Valkey backend the host calls a plugin only on partitions it
// holds a lease on (host/partlease): the hosts of a deployment split the
// partitions of every family, a lone host owning all of them from its
// first step. Each call is granted against the lease (host id and fencing
// token go into its CycleRecord) and its deadline is capped by the lease;
// completions are dispatched only by their flow partition's owner; Stop
// releases the leases after the loops ended, so peers take over at once.
//
// # Notes
//
//   - A timed-out call is trapped by the checks the host adds to the
//     plugin's loops and function entries (instrumentModule,
//     interrupt.go); a module it cannot instrument is refused at load
//     (ErrNotInterruptible). The pool discards any instance whose call
//     failed or whose output was bad and makes a fresh one. Each linear memory is its own mapping of the cap
//     (memory.go), unmapped when the instance is discarded.
//   - Host functions honour the call's context: they cannot be interrupted
//     by the wasm timeout, so the backend call itself carries the deadline
//     (the wall cap and the leases'; time waiting on the backend is not
//     the plugin's CPU time).
//   - Every time the host schedules by or records (cadence, deadlines,
//     CycleRecord and status times) comes from Config.Clock. The system
//     clock is read directly only to measure elapsed durations (a call's
//     latency, a compile), to time a server-clock read, and to age the
//     compilation cache's files, whose modification times are the
//     system's.
package host
