// Package valkey is fabric's Valkey backend: a launcher for a private
// valkey-server/redis-server child, a client on valkey-go, the loader of the
// embedded `flowfabric` Functions library, and one typed wrapper per ff_*
// function that builds KEYS/ARGV from ids and decodes the reply.
//
// Wrappers never hand-assemble key names: every key comes from package
// model. Logical errors returned by the library ({0, code, details...}) come
// back as *LuaError, which matches its ErrorCode with errors.Is.
//
// # Valkey Cluster
//
// A valkey+cluster:// URL (or a plain URL naming one cluster node) gives a
// cluster client. Every fabric key carries its partition's hash tag, so
// every FCALL is single-slot; what is per node — Functions libraries,
// CONFIG, keyspace notifications — runs on every primary (Primaries,
// EnsureLibrary, EnableZaddKeyevents, WatchZaddKeyevents). The worker
// registry keys carry no hash tag (upstream too), so on a cluster
// RegisterWorker and HeartbeatWorker write them with single-key commands
// (registry_cluster.go). An FCALL whose keys span slots fails with
// ErrCrossSlot instead of reaching valkey-go, which panics on one; Raw's
// DoMulti splits a pipeline that mixes keyless commands with several slots,
// another valkey-go panic.
//
// # Credentials and TLS
//
// A URL's userinfo authenticates (redis://user:password@host:port), or
// ClientConfig.Username and Password, which win over it. rediss:// (and
// valkeys://, rediss+cluster://) is TLS verified against the system's
// roots; ClientConfig.TLS, built with TLSOptions.Config from a CA file, a
// client certificate and key and a server name, sets it explicitly:
//
//	tc, err := valkey.TLSOptions{CAFile: "ca.pem", CertFile: "client.pem", KeyFile: "client.key"}.Config()
//	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: "rediss://valkey.internal:6380",
//		Username: "fabric", Password: os.Getenv("FABRIC_VALKEY_PASSWORD"), TLS: tc})
//
// A refused password is ErrAuth, a failed handshake ErrTLS; IsUnreachable
// tells a server that is not there yet from one that refuses. Errors and
// messages name the server by its redacted URL: no password reaches them.
package valkey
