package valkey

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
)

// Cluster URL schemes: valkey+cluster://host:port[,host:port...][?opts]
// (and redis+cluster://, valkeys+cluster://, rediss+cluster:// for TLS).
// The hosts are seed nodes; the client discovers the rest of the cluster
// from them. A plain redis:// or valkey:// URL naming one cluster node
// works too: the client detects the cluster and routes the same way.
const (
	SchemeValkeyCluster = "valkey+cluster"
	SchemeRedisCluster  = "redis+cluster"
)

// clusterRefreshInterval is how often the cluster client re-reads the
// topology in the background (it also refreshes on MOVED/ASK and on
// connection errors).
const clusterRefreshInterval = 5 * time.Second

// urlSchemes lists the URL schemes parseURL accepts, for its errors.
const urlSchemes = "redis://, rediss://, valkey://, valkeys://, unix:///path, or a cluster: valkey+cluster://, redis+cluster://, valkeys+cluster://, rediss+cluster://"

// parseURL turns a fabric backend URL into valkey-go options. It reports
// whether the URL demands a cluster (a +cluster scheme).
func parseURL(raw string) (vk.ClientOption, bool, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return vk.ClientOption{}, false, fmt.Errorf("no scheme (want %s)", urlSchemes)
	}
	base, isCluster := strings.CutSuffix(scheme, "+cluster")
	switch base {
	case "valkey", "redis", "valkeys", "rediss":
	case "unix":
		if !isCluster {
			break
		}
		fallthrough
	default:
		return vk.ClientOption{}, isCluster, fmt.Errorf("unknown scheme %q (want %s)", scheme, urlSchemes)
	}
	if !isCluster {
		opt, err := vk.ParseURL(raw)
		return opt, false, err
	}
	hostEnd := strings.IndexAny(rest, "/?")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	authority, tail := rest[:hostEnd], rest[hostEnd:]
	user, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		user, hosts = authority[:i+1], authority[i+1:]
	}
	var seeds []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			seeds = append(seeds, h)
		}
	}
	if len(seeds) == 0 {
		return vk.ClientOption{}, true, errors.New("a cluster URL needs at least one host:port")
	}
	path, query, _ := strings.Cut(tail, "?")
	if path != "" && path != "/" && path != "/0" {
		return vk.ClientOption{}, true, fmt.Errorf("path %q: a cluster has only database 0", path)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return vk.ClientOption{}, true, fmt.Errorf("query %q: %w", query, err)
	}
	if db := q.Get("db"); db != "" && db != "0" {
		return vk.ClientOption{}, true, fmt.Errorf("db=%s: a cluster has only database 0", db)
	}
	for _, s := range seeds[1:] {
		q.Add("addr", s)
	}
	std := base + "://" + user + seeds[0]
	if enc := q.Encode(); enc != "" {
		std += "?" + enc
	}
	opt, err := vk.ParseURL(std)
	return opt, true, err
}

// IsCluster reports whether the client talks to a Valkey Cluster.
func (c *Client) IsCluster() bool { return c.cluster }

// Node is one primary the client reaches.
type Node struct {
	// Addr is host:port in a cluster; the client's URL otherwise.
	Addr string
	// Client sends commands to this node only. It shares the client's
	// connections: never Close it.
	Client vk.Client
}

// Primaries returns the nodes that hold data: every primary of a cluster
// (sorted by address), or the one server otherwise. Functions libraries,
// keyspace notifications and CONFIG are per node, so whatever touches
// them runs on each of these.
func (c *Client) Primaries(ctx context.Context) ([]Node, error) {
	if !c.cluster {
		return []Node{{Addr: c.where, Client: c.c}}, nil
	}
	var out []Node
	for addr, nc := range c.c.Nodes() {
		role, err := nc.Do(ctx, nc.B().Role().Build()).ToArray()
		if err != nil {
			// A node that is down holds nothing we could reach; the caller
			// finds out when it routes a key there.
			c.log.Warn("valkey: cluster node unreachable", "node", addr, "error", err)
			continue
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r == "master" {
				out = append(out, Node{Addr: addr, Client: nc})
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("valkey: no reachable cluster primary")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// checkClusterMode verifies after connecting that the client's mode fits
// the server: a cluster URL must reach a cluster, and a cluster node must
// not be driven by a single-node client (valkey-go falls back to one when
// it cannot set up cluster routing, e.g. when a database other than 0 was
// asked for).
func (c *Client) checkClusterMode(ctx context.Context, wantCluster bool, opt vk.ClientOption) error {
	if c.cluster {
		if opt.DialCtxFn != nil || opt.DialFn != nil {
			return fmt.Errorf("valkey: %s is a cluster node; reach a cluster over TCP (valkey+cluster://host:port,...), not a unix socket", c.where)
		}
		return nil
	}
	info, err := c.c.Do(ctx, c.c.B().Info().Section("cluster").Build()).ToString()
	if err != nil {
		return fmt.Errorf("valkey: INFO cluster on %s: %w", c.where, err)
	}
	enabled := strings.Contains(info, "cluster_enabled:1")
	switch {
	case enabled && opt.SelectDB != 0:
		return fmt.Errorf("valkey: %s is a cluster node and a cluster has only database 0 (asked for %d)", c.where, opt.SelectDB)
	case enabled:
		return fmt.Errorf("valkey: %s is a cluster node but cluster routing could not be set up; use valkey+cluster://host:port,...", c.where)
	case wantCluster:
		return fmt.Errorf("valkey: %s is not a cluster (cluster_enabled:0); use valkey://host:port", c.where)
	}
	return nil
}

// ErrCrossSlot is the error of an FCALL whose keys hash to different
// cluster slots. valkey-go's cluster client panics on such a command, so
// the client refuses it first (a plugin's bad key set must not take the
// host down).
var ErrCrossSlot = errors.New("CROSSSLOT keys in request don't hash to the same slot")

// KeySlot is the Valkey Cluster slot of key: CRC16 of its hash tag (the
// text between the first '{' and the next '}', when not empty), else of
// the whole key, mod 16384.
func KeySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return model.CRC16([]byte(key)) & 16383
}

// sameSlot returns ErrCrossSlot (naming two keys) when keys span slots on
// a cluster.
func (c *Client) sameSlot(keys []string) error {
	if !c.cluster || len(keys) < 2 {
		return nil
	}
	s := KeySlot(keys[0])
	for _, k := range keys[1:] {
		if KeySlot(k) != s {
			return fmt.Errorf("%w: %s and %s", ErrCrossSlot, keys[0], k)
		}
	}
	return nil
}

// slotSafeClient is valkey-go's cluster client except for DoMulti: a
// pipeline that mixes keyless commands (TIME, a keyless FCALL) with keyed
// commands of more than one slot, which valkey-go refuses with a panic,
// goes as two pipelines, keyed commands first. Every other pipeline, and
// every other method, is the cluster client's own (it groups keyed
// commands per slot itself). Raw hands this client out, so no caller can
// trip the panic.
type slotSafeClient struct {
	vk.Client
	keyless uint16 // the slot valkey-go gives keyless commands
}

func newSlotSafeClient(c vk.Client) *slotSafeClient {
	probe := c.B().Time().Build()
	return &slotSafeClient{Client: c, keyless: probe.Slot()}
}

// DoMulti implements vk.Client.
func (s *slotSafeClient) DoMulti(ctx context.Context, multi ...vk.Completed) []vk.ValkeyResult {
	var keyless, keyed []int
	slots := map[uint16]struct{}{}
	for i := range multi {
		if sl := multi[i].Slot(); sl == s.keyless {
			keyless = append(keyless, i)
		} else {
			keyed = append(keyed, i)
			slots[sl] = struct{}{}
		}
	}
	if len(keyless) == 0 || len(slots) < 2 {
		return s.Client.DoMulti(ctx, multi...)
	}
	out := make([]vk.ValkeyResult, len(multi))
	for _, group := range [][]int{keyed, keyless} {
		cmds := make(vk.Commands, len(group))
		for j, i := range group {
			cmds[j] = multi[i]
		}
		for j, r := range s.Client.DoMulti(ctx, cmds...) {
			out[group[j]] = r
		}
	}
	return out
}
