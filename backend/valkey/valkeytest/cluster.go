package valkeytest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
)

// ClusterPrimaries is the number of primaries of a test cluster.
const ClusterPrimaries = 3

// Cluster is a Valkey Cluster of ClusterPrimaries redis-server processes on
// loopback ports, no replicas, no persistence. Each node keeps its cluster
// config file in its own directory, so RestartNode brings a node back with
// its id and slots (and, without persistence, no data and no libraries).
type Cluster struct {
	// Nodes are the primaries, in the order their ports were given to
	// redis-cli --cluster create.
	Nodes []*valkey.Server
}

var (
	clusterMu     sync.Mutex
	sharedCluster *Cluster
	clusterErr    error
)

// SharedCluster returns the test binary's cluster, starting it on first
// use; Run stops it. Tests sharing it tell their keys apart by the ids they
// mint (a cluster has only database 0).
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if sharedCluster == nil && clusterErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		sharedCluster, clusterErr = StartCluster(ctx)
	}
	if clusterErr != nil {
		tb.Fatalf("valkeytest: start cluster: %v", clusterErr)
	}
	return sharedCluster
}

func stopSharedCluster() {
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if sharedCluster != nil {
		sharedCluster.Stop()
		sharedCluster = nil
	}
}

// StartCluster starts ClusterPrimaries cluster-enabled servers on free
// loopback ports, joins them with redis-cli --cluster create and waits
// until every node reports cluster_state:ok. A port taken between the
// probe and the start (other test binaries pick ports too) is retried on
// fresh ports.
func StartCluster(ctx context.Context) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if cli, err = exec.LookPath("valkey-cli"); err != nil {
			return nil, fmt.Errorf("valkeytest: neither redis-cli nor valkey-cli is on PATH: %w", err)
		}
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		c, err := startClusterOnce(ctx, cli)
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func startClusterOnce(ctx context.Context, cli string) (*Cluster, error) {
	c := &Cluster{}
	ports, err := freeClusterPorts(ClusterPrimaries)
	if err != nil {
		return nil, err
	}
	for _, port := range ports {
		s, err := valkey.StartServer(ctx, valkey.ServerConfig{
			Port: port,
			ExtraArgs: []string{
				"--cluster-enabled", "yes",
				// Relative to the server's own directory.
				"--cluster-config-file", "nodes.conf",
				// Shorter than the default 15 s so a killed node is marked
				// failed quickly; nodes still serving keep serving their
				// slots while one is down.
				"--cluster-node-timeout", "3000",
				"--cluster-require-full-coverage", "no",
			},
			Logger: Logger(),
		})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.TCPAddr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("valkeytest: %s --cluster create: %w: %s", cli, err, out)
	}
	if err := c.WaitOK(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// freeClusterPorts picks n ports whose cluster bus ports (port+10000) are
// free too.
func freeClusterPorts(n int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p := 20000 + rand.IntN(25000)
		if portFree(p) && portFree(p+10000) {
			ports = append(ports, p)
		}
	}
	if len(ports) < n {
		return nil, fmt.Errorf("valkeytest: no %d free loopback port pairs", n)
	}
	return ports, nil
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// URL is the cluster's fabric URL, valkey+cluster://host:port,host:port,...
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.TCPAddr()
	}
	return "valkey+cluster://" + strings.Join(addrs, ",")
}

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.TCPAddr()
	}
	return out
}

// NodeClient returns a plain client on node i alone (over its unix
// socket); the caller closes it.
func (c *Cluster) NodeClient(i int) (vk.Client, error) {
	opt, err := vk.ParseURL(c.Nodes[i].URL())
	if err != nil {
		return nil, err
	}
	opt.ForceSingleClient = true
	opt.DisableCache = true
	return vk.NewClient(opt)
}

// clusterInfo runs CLUSTER INFO on node i.
func (c *Cluster) clusterInfo(ctx context.Context, i int) (string, error) {
	cl, err := c.NodeClient(i)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	return cl.Do(ctx, cl.B().ClusterInfo().Build()).ToString()
}

// NodeOf returns the index in Nodes of the primary that serves key, from
// CLUSTER SLOTS as node 0 sees it.
func (c *Cluster) NodeOf(ctx context.Context, key string) (int, error) {
	cl, err := c.NodeClient(0)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ranges, err := cl.Do(ctx, cl.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return 0, fmt.Errorf("valkeytest: CLUSTER SLOTS: %w", err)
	}
	slot := int64(valkey.KeySlot(key))
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		if slot < lo || slot > hi {
			continue
		}
		primary, _ := f[2].ToArray()
		if len(primary) < 2 {
			break
		}
		port, _ := primary[1].AsInt64()
		for i, n := range c.Nodes {
			if strings.HasSuffix(n.TCPAddr(), ":"+strconv.FormatInt(port, 10)) {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("valkeytest: no node serves slot %d of %s", slot, key)
}

// WaitOK polls every node until each reports cluster_state:ok.
func (c *Cluster) WaitOK(ctx context.Context) error {
	for i := range c.Nodes {
		for {
			info, err := c.clusterInfo(ctx, i)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("valkeytest: node %s not cluster_state:ok (last: %v %q): %w", c.Nodes[i].TCPAddr(), err, firstLine(info), ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

// RestartNode kills node i (SIGKILL) and starts it again with the same
// directory and cluster config file, then waits for cluster_state:ok on
// every node. The node comes back owning its slots, with no data and no
// Functions libraries.
func (c *Cluster) RestartNode(ctx context.Context, i int) error {
	if err := c.Nodes[i].Restart(ctx); err != nil {
		return err
	}
	return c.WaitOK(ctx)
}

// Stop stops every node and removes their directories.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// ClusterClient dials the shared cluster through its valkey+cluster URL,
// bootstraps it (partition config, HMAC secret of tests, library on every
// primary, lanes) and closes the client when the test ends.
func ClusterClient(tb testing.TB) *valkey.Client {
	tb.Helper()
	c := SharedCluster(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := valkey.Dial(ctx, valkey.ClientConfig{URL: c.URL(), Logger: Logger()})
	if err != nil {
		tb.Fatalf("valkeytest: dial cluster %s: %v", c.URL(), err)
	}
	tb.Cleanup(cl.Close)
	if err := cl.Bootstrap(ctx, valkey.BootstrapConfig{}); err != nil {
		tb.Fatalf("valkeytest: bootstrap cluster: %v", err)
	}
	return cl
}
