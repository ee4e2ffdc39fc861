package valkeytest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
)

// NewReplicatedCluster starts a cluster of ClusterPrimaries primaries with
// one replica each (2×ClusterPrimaries nodes, redis-cli --cluster create
// --cluster-replicas 1), a 3 s node timeout so a killed primary's replica
// takes over within seconds, and waits until every node reports
// cluster_state:ok and every primary has its replica attached. Its URL
// names every node, so a client can reach the cluster with any one node
// dead. The nodes are stopped when the test ends.
func NewReplicatedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if cli, err = exec.LookPath("valkey-cli"); err != nil {
			tb.Fatalf("valkeytest: neither redis-cli nor valkey-cli is on PATH: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := &Cluster{}
	tb.Cleanup(c.Stop)
	// A port found free can be taken by another process before the node
	// binds it: pick another and try again, a few times.
	for len(c.Nodes) < 2*ClusterPrimaries {
		var s *valkey.Server
		var err error
		for try := 0; ; try++ {
			ports, perr := freeClusterPorts(1)
			if perr != nil {
				tb.Fatal(perr)
			}
			s, err = valkey.StartServer(ctx, valkey.ServerConfig{Port: ports[0], Logger: Logger(),
				ExtraArgs: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
					"--cluster-node-timeout", "3000", "--cluster-require-full-coverage", "no"}})
			if err == nil || try == 4 || !strings.Contains(err.Error(), "Address already in use") {
				break
			}
		}
		if err != nil {
			tb.Fatalf("valkeytest: start cluster node: %v", err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append(append([]string{"--cluster", "create"}, c.Addrs()...), "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("valkeytest: %s --cluster create --cluster-replicas 1: %v: %s", cli, err, out)
	}
	if err := c.WaitOK(ctx); err != nil {
		tb.Fatal(err)
	}
	for {
		roles, err := c.Roles(ctx)
		replicas := 0
		for _, r := range roles {
			if r == "slave" {
				replicas++
			}
		}
		if err == nil && replicas == ClusterPrimaries {
			break
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("valkeytest: replicas not attached (roles %v, %v)", roles, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return c
}

// Roles returns ROLE's first field for every node ("master", "slave";
// "down" for a node that does not answer).
func (c *Cluster) Roles(ctx context.Context) ([]string, error) {
	out := make([]string, len(c.Nodes))
	for i := range c.Nodes {
		out[i] = "down"
		cl, err := c.NodeClient(i)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		role, err := cl.Do(rctx, cl.B().Role().Build()).ToArray()
		cancel()
		cl.Close()
		if err != nil || len(role) == 0 {
			continue
		}
		r, _ := role[0].ToString()
		if r == "slave" {
			// Attached once the link to its primary is up.
			if len(role) >= 4 {
				if st, _ := role[3].ToString(); st != "connected" {
					r = "slave-" + st
				}
			}
		}
		out[i] = r
	}
	return out, nil
}

// WaitPrimaries waits until n nodes answer ROLE as primaries and every
// live node reports cluster_state:ok (after a failover: the replica of a
// killed primary has taken over its slots).
func (c *Cluster) WaitPrimaries(ctx context.Context, n int) error {
	for {
		roles, _ := c.Roles(ctx)
		primaries, ok := 0, true
		for i, r := range roles {
			if r == "master" {
				primaries++
			}
			if r == "down" {
				continue
			}
			info, err := c.clusterInfo(ctx, i)
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
		}
		if primaries == n && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("valkeytest: waiting for %d primaries and cluster_state:ok: roles %v: %w", n, roles, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
