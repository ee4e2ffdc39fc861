package pdktest

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

// Set sets a string value.
func (h *Host) Set(key, value string) {
	if h.strs == nil {
		h.strs = map[string]string{}
	}
	h.strs[key] = value
}

// Str returns a string value and whether it exists.
func (h *Host) Str(key string) (string, bool) {
	v, ok := h.strs[key]
	return v, ok
}

// Dispatch runs p's dispatcher on completions through the binary codec, as
// the host would, and returns the decoded result. No partition check
// applies (dispatchers are not partition-scoped).
func (h *Host) Dispatch(p pdk.Plugin, completions ...abi.Completion) abi.ScanResult {
	h.tag = ""
	req := abi.DispatchRequest{Batch: 1, Completions: completions, DeadlineMs: h.manifest.TimeoutMs}
	in, _ := req.MarshalBinary()
	out, err := p.HandleDispatch(h, in)
	if err != nil {
		h.fatalf("pdktest: dispatch: %v", err)
	}
	var res abi.ScanResult
	if err := res.UnmarshalBinary(out); err != nil {
		h.fatalf("pdktest: decode dispatch result: %v", err)
	}
	return res
}

func (h *Host) exists(key string) bool {
	_, a := h.hashes[key]
	_, b := h.sets[key]
	_, c := h.zsets[key]
	_, d := h.strs[key]
	return (a && len(h.hashes[key]) > 0) || (b && len(h.sets[key]) > 0) || (c && len(h.zsets[key]) > 0) || d
}

// Read implements pdk.Host.
func (h *Host) Read(op, key string, args ...string) ([]string, error) {
	req := abi.ReadRequest(op, key, args...)
	if err := req.Validate(); err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, err.Error())
	}
	if err := h.checkRead(key); err != nil {
		return nil, err
	}
	switch op {
	case abi.ReadSRandMember:
		n, _ := strconv.Atoi(args[0])
		all, _ := h.SMembers(key)
		if n < len(all) {
			all = all[:n]
		}
		return all, nil
	case abi.ReadSCard:
		return []string{strconv.Itoa(len(h.sets[key]))}, nil
	case abi.ReadExists:
		if h.exists(key) {
			return []string{"1"}, nil
		}
		return []string{"0"}, nil
	case abi.ReadHGetAll:
		var out []string
		fs := make([]string, 0, len(h.hashes[key]))
		for f := range h.hashes[key] {
			fs = append(fs, f)
		}
		slices.Sort(fs)
		for _, f := range fs {
			out = append(out, f, h.hashes[key][f])
		}
		return out, nil
	case abi.ReadGet:
		if v, ok := h.strs[key]; ok {
			return []string{v}, nil
		}
		return nil, nil
	}
	return nil, abi.Errorf(abi.CodeBadRequest, "read "+op)
}

// Write implements pdk.Host.
func (h *Host) Write(op, key string, args ...string) (int64, error) {
	req := abi.WriteRequest(op, key, args...)
	if err := req.Validate(); err != nil {
		return 0, abi.Errorf(abi.CodeBadRequest, err.Error())
	}
	if err := h.manifest.Capabilities.AllowWrite(key); err != nil {
		return 0, h.deny(err)
	}
	if h.tag != "" {
		if err := h.manifest.Capabilities.AllowKeyOnPartition(key, h.tag); err != nil {
			return 0, h.deny(err)
		}
	}
	var n int64
	switch op {
	case abi.WriteHSet:
		for i := 0; i+1 < len(args); i += 2 {
			if _, ok := h.hashes[key][args[i]]; !ok {
				n++
			}
		}
		h.HSet(key, args...)
	case abi.WriteHDel:
		for _, f := range args {
			if _, ok := h.hashes[key][f]; ok {
				delete(h.hashes[key], f)
				n++
			}
		}
	case abi.WriteSRem:
		for _, m := range args {
			if _, ok := h.sets[key][m]; ok {
				delete(h.sets[key], m)
				n++
			}
		}
	case abi.WriteZRem:
		for _, m := range args {
			if _, ok := h.zsets[key][m]; ok {
				delete(h.zsets[key], m)
				n++
			}
		}
	case abi.WriteDel:
		if h.exists(key) {
			n = 1
		}
		delete(h.hashes, key)
		delete(h.sets, key)
		delete(h.zsets, key)
		delete(h.strs, key)
	case abi.WriteSet:
		h.Set(key, args[0])
		n = 1
	case abi.WriteZRemRangeByScore:
		lo, loEx, err1 := parseBound(args[0])
		hi, hiEx, err2 := parseBound(args[1])
		if err1 != nil || err2 != nil {
			return 0, abi.Errorf(abi.CodeBadRequest, fmt.Sprintf("zremrangebyscore %v", args))
		}
		for m, s := range h.zsets[key] {
			if (s > lo || (!loEx && s == lo)) && (s < hi || (!hiEx && s == hi)) {
				delete(h.zsets[key], m)
				n++
			}
		}
	}
	return n, nil
}
