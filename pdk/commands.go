package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
)

// SRandMember returns up to n random distinct members of a set.
func SRandMember(h Host, key string, n int) ([]string, error) {
	return h.Read(abi.ReadSRandMember, key, strconv.Itoa(n))
}

// SCard returns a set's cardinality.
func SCard(h Host, key string) (int64, error) {
	return intReply(h.Read(abi.ReadSCard, key))
}

// Exists reports whether key exists.
func Exists(h Host, key string) (bool, error) {
	n, err := intReply(h.Read(abi.ReadExists, key))
	return n > 0, err
}

// HGetAll returns a hash as a map (empty when the key is missing).
func HGetAll(h Host, key string) (map[string]string, error) {
	flat, err := h.Read(abi.ReadHGetAll, key)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out[flat[i]] = flat[i+1]
	}
	return out, nil
}

// Get returns a string value and whether it exists.
func Get(h Host, key string) (string, bool, error) {
	v, err := h.Read(abi.ReadGet, key)
	if err != nil || len(v) == 0 {
		return "", false, err
	}
	return v[0], true, nil
}

// HGet returns one hash field ("" and false when missing).
func HGet(h Host, key, field string) (string, bool, error) {
	f, err := h.HMGet(key, field)
	if err != nil || len(f) == 0 {
		return "", false, err
	}
	return f[0].Value, f[0].Present, nil
}

func intReply(v []string, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	if len(v) == 0 {
		return 0, nil
	}
	n, perr := strconv.ParseInt(v[0], 10, 64)
	if perr != nil {
		return 0, abi.Errorf(abi.CodeBackend, "not an integer reply: "+strconv.Quote(v[0]))
	}
	return n, nil
}
