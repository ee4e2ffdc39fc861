// Package replay records what a plugin may see of one partition of a live
// Valkey deployment, and replays the plugin on that case in a private
// server at the recorded time: the plugin's actions (the FCALLs and writes
// it made, with their replies) and the difference they made to the
// keyspace, the same bytes on every replay.
//
// A case holds every key of the partition (the keys carrying its hash
// tag: what the plugin's granted functions read and write), the
// deployment-wide keys its read grant names exactly (the lane registry,
// the partition config), each as a DUMP payload with its time to live,
// and the server's time when it was taken.
//
// What is virtualised on replay: the server time the plugin reads (the
// host's clock function), the Functions library's clock (the private
// server loads the library with its clock fixed at the recorded time), and
// the guest's WASI clocks and random source. Stream entry ids, which the
// server assigns from its own clock, are printed as their order in the
// stream.
package replay

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// Format names the case file layout.
const Format = "fabric-replay-case/1"

// MaxCaseBytes bounds a case file read by ReadCase.
const MaxCaseBytes = 256 << 20

// Case is one recorded partition.
type Case struct {
	// Format is always Format.
	Format string `json:"format"`
	// Plugin and PluginSHA256 name the plugin the case was recorded for
	// (its grant chose the deployment-wide keys).
	Plugin       string `json:"plugin"`
	PluginSHA256 string `json:"plugin_sha256,omitempty"`
	// Partition is the partition recorded ("{fp:7}"), Tag its hash tag.
	Partition string `json:"partition"`
	Tag       string `json:"tag"`
	// ServerTimeMs is the server's clock when the case was taken.
	ServerTimeMs int64 `json:"server_time_ms"`
	// Partitions are the deployment's partition counts.
	Partitions model.PartitionConfig `json:"partitions"`
	// Keys are the recorded keys, sorted by name.
	Keys []Key `json:"keys"`
}

// Key is one recorded key.
type Key struct {
	Name string `json:"key"`
	// PTTLMs is the time to live left in milliseconds (0: none).
	PTTLMs int64 `json:"pttl_ms,omitempty"`
	// Dump is the key's DUMP payload, base64.
	Dump string `json:"dump"`
	// Value is the key's content, readable (pdktest.LoadCase loads it
	// into the fake host); nil for a type it does not hold (streams,
	// lists) and in cases recorded before it was kept.
	Value *Value `json:"value,omitempty"`
}

// Value is a key's content by type: "string", "hash", "set" or "zset".
type Value struct {
	Type   string            `json:"type"`
	String string            `json:"string,omitempty"`
	Hash   map[string]string `json:"hash,omitempty"`
	Set    []string          `json:"set,omitempty"`
	ZSet   []ZMember         `json:"zset,omitempty"`
}

// ZMember is one member of a sorted set with its score.
type ZMember struct {
	Member string  `json:"member"`
	Score  float64 `json:"score"`
}

// ParsePartition parses "flow:7", "budget:3", "quota:0" (or the hash tag
// spelling "fp:7", "{fp:7}", "b:3", "q:0") against the deployment's
// partition counts.
func ParsePartition(s string, pc model.PartitionConfig) (model.Partition, error) {
	body := strings.Trim(strings.TrimSpace(s), "{}")
	fam, num, ok := strings.Cut(body, ":")
	if !ok {
		return model.Partition{}, fmt.Errorf("partition %q: want FAMILY:INDEX, e.g. flow:7", s)
	}
	switch fam {
	case "flow":
		fam = "fp"
	case "budget":
		fam = "b"
	case "quota":
		fam = "q"
	}
	p, err := model.ParsePartitionTag("{" + fam + ":" + num + "}")
	if err != nil {
		return model.Partition{}, fmt.Errorf("partition %q: %w", s, err)
	}
	if p.Index >= pc.Count(p.Family) {
		return model.Partition{}, fmt.Errorf("partition %q: index out of range (the deployment has %d %s partitions)", s, pc.Count(p.Family), p.Family)
	}
	return p, nil
}

// Validate checks a case read from a file: its format, partition and that
// every key belongs to it (its hash tag) or is one of the deployment-wide
// keys a case may hold.
func (c *Case) Validate() error {
	if c.Format != Format {
		return fmt.Errorf("replay: case format %q, want %q", c.Format, Format)
	}
	if err := c.Partitions.Validate(); err != nil {
		return fmt.Errorf("replay: case partitions: %w", err)
	}
	p, err := ParsePartition(c.Partition, c.Partitions)
	if err != nil {
		return fmt.Errorf("replay: case: %w", err)
	}
	if c.Tag != p.Tag() {
		return fmt.Errorf("replay: case tag %q does not match partition %s (%s)", c.Tag, c.Partition, p.Tag())
	}
	if c.ServerTimeMs <= 0 {
		return errors.New("replay: case has no server time")
	}
	if !sort.SliceIsSorted(c.Keys, func(i, j int) bool { return c.Keys[i].Name < c.Keys[j].Name }) {
		return errors.New("replay: case keys are not sorted")
	}
	for i, k := range c.Keys {
		if i > 0 && c.Keys[i-1].Name == k.Name {
			return fmt.Errorf("replay: case key %q appears twice", k.Name)
		}
		if abi.HashTag(k.Name) != c.Tag && !abi.IsGlobalReadKey(k.Name) {
			return fmt.Errorf("replay: case key %q is neither of partition %s nor a deployment-wide key", k.Name, c.Tag)
		}
		if k.PTTLMs < 0 {
			return fmt.Errorf("replay: case key %q: negative ttl", k.Name)
		}
		if _, err := base64.StdEncoding.DecodeString(k.Dump); err != nil {
			return fmt.Errorf("replay: case key %q: dump: %w", k.Name, err)
		}
	}
	return nil
}

// ReadCase decodes and validates a case.
func ReadCase(r io.Reader) (*Case, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxCaseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("replay: read case: %w", err)
	}
	if len(b) > MaxCaseBytes {
		return nil, fmt.Errorf("replay: case larger than %d bytes", MaxCaseBytes)
	}
	var c Case
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("replay: decode case: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Write encodes the case as indented JSON.
func (c *Case) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return fmt.Errorf("replay: write case: %w", err)
	}
	return nil
}
