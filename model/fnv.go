package model

// FNV1a64 is the 64-bit FNV-1a hash of s, FlowFabric's hash of worker
// instance ids: the scheduler's scan start (datamodel §2.7) and the
// Postgres worker registry's partition_key (FNV1a64 % 256).
func FNV1a64(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}
