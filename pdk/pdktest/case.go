package pdktest

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/model"
)

// replayCase is the part of a recorded case (`fabric record`, format
// fabric-replay-case/1) the fake host loads.
type replayCase struct {
	Format       string `json:"format"`
	Tag          string `json:"tag"`
	ServerTimeMs int64  `json:"server_time_ms"`
	Keys         []struct {
		Name  string `json:"key"`
		Value *struct {
			Type   string            `json:"type"`
			String string            `json:"string"`
			Hash   map[string]string `json:"hash"`
			Set    []string          `json:"set"`
			ZSet   []struct {
				Member string  `json:"member"`
				Score  float64 `json:"score"`
			} `json:"zset"`
		} `json:"value"`
	} `json:"keys"`
}

// LoadCase loads a case recorded by `fabric record` (a partition of a
// live deployment) into the fake host: its strings, hashes, sets and
// sorted sets, with NowMs at the recorded server time. It returns the
// recorded partition, to pass to Scan:
//
//	part := h.LoadCase("testdata/stuck.case.json")
//	res := h.Scan(plugin, part, 1)
//
// Keys of other types (streams, lists) are left out and their names
// returned in skipped. A case recorded before cases kept readable values
// fails the test: record it again.
func (h *Host) LoadCase(path string) (part model.Partition, skipped []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		h.fatalf("pdktest: case: %v", err)
		return part, nil
	}
	var cs replayCase
	if err := json.Unmarshal(b, &cs); err != nil {
		h.fatalf("pdktest: case %s: %v", path, err)
		return part, nil
	}
	if cs.Format != "fabric-replay-case/1" {
		h.fatalf("pdktest: case %s: format %q, want fabric-replay-case/1", path, cs.Format)
		return part, nil
	}
	part, err = parseTag(cs.Tag)
	if err != nil {
		h.fatalf("pdktest: case %s: %v", path, err)
		return part, nil
	}
	h.NowMs = cs.ServerTimeMs
	for _, k := range cs.Keys {
		v := k.Value
		if v == nil {
			skipped = append(skipped, k.Name)
			continue
		}
		switch v.Type {
		case "string":
			h.Set(k.Name, v.String)
		case "hash":
			for f, val := range v.Hash {
				h.HSet(k.Name, f, val)
			}
		case "set":
			h.SAdd(k.Name, v.Set...)
		case "zset":
			for _, m := range v.ZSet {
				h.ZAdd(k.Name, m.Score, m.Member)
			}
		default:
			skipped = append(skipped, k.Name)
		}
	}
	if len(cs.Keys) > 0 && len(skipped) == len(cs.Keys) {
		h.fatalf("pdktest: case %s holds no readable values (recorded by an older fabric): record it again", path)
	}
	return part, skipped
}

// parseTag parses a partition hash tag, "{fp:7}".
func parseTag(tag string) (model.Partition, error) {
	inner, ok := strings.CutPrefix(tag, "{")
	if inner, ok = strings.CutSuffix(inner, "}"); !ok {
		return model.Partition{}, fmt.Errorf("partition tag %q", tag)
	}
	prefix, idx, _ := strings.Cut(inner, ":")
	n, err := strconv.ParseUint(idx, 10, 16)
	if err != nil {
		return model.Partition{}, fmt.Errorf("partition tag %q: %w", tag, err)
	}
	for _, f := range []model.Family{model.FamilyFlow, model.FamilyBudget, model.FamilyQuota} {
		if f.Prefix() == prefix {
			return model.Partition{Family: f, Index: uint16(n)}, nil
		}
	}
	return model.Partition{}, fmt.Errorf("partition tag %q: unknown family", tag)
}
