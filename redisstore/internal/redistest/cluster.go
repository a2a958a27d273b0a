package redistest

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters (no replicas) on loopback
// ports, started by StartCluster.
type Cluster struct {
	Servers []*Server
}

// StartCluster starts three cluster-enabled servers, joins them with
// redis-cli --cluster create, waits until every node reports
// cluster_state:ok, and stops them when tb ends. It skips tb when
// redis-server or redis-cli is not installed.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		unavailable(tb, "redis-cli is not installed")
	}
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		c.Servers = append(c.Servers, Start(tb, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Servers {
		for {
			info, err := Bulk(s.Addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("cluster node %s not ready: %v %s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr
	}
	return out
}
