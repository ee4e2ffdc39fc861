// Package valkey is fabric's Valkey backend: a launcher for a private
// valkey-server/redis-server child, a client on valkey-go, the loader of the
// embedded `flowfabric` Functions library, and one typed wrapper per ff_*
// function that builds KEYS/ARGV from ids and decodes the reply.
//
// Wrappers never hand-assemble key names: every key comes from package
// model. Logical errors returned by the library ({0, code, details...}) come
// back as *LuaError, which matches its ErrorCode with errors.Is.
package valkey
