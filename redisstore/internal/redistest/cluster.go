package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
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

// NodeID returns the cluster node ID of the i-th server (CLUSTER MYID).
func (c *Cluster) NodeID(tb testing.TB, i int) string {
	tb.Helper()
	id, err := Bulk(c.Servers[i].Addr, "CLUSTER", "MYID")
	if err != nil {
		tb.Fatalf("CLUSTER MYID on %s: %v", c.Servers[i].Addr, err)
	}
	return id
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(tb testing.TB, key string) int {
	tb.Helper()
	reply, err := Do(c.Servers[0].Addr, "CLUSTER", "KEYSLOT", key)
	if err != nil || !strings.HasPrefix(reply, ":") {
		tb.Fatalf("CLUSTER KEYSLOT %s: %q, %v", key, reply, err)
	}
	slot, err := strconv.Atoi(reply[1:])
	if err != nil {
		tb.Fatal(err)
	}
	return slot
}

// Owner returns the index of the server that serves slot, as the servers
// themselves say (CLUSTER NODES, the "myself" line of each).
func (c *Cluster) Owner(tb testing.TB, slot int) int {
	tb.Helper()
	for i, s := range c.Servers {
		nodes, err := Bulk(s.Addr, "CLUSTER", "NODES")
		if err != nil {
			tb.Fatalf("CLUSTER NODES on %s: %v", s.Addr, err)
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "myself") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && a <= slot && slot <= b {
					return i
				}
			}
		}
	}
	tb.Fatalf("no node serves slot %d", slot)
	return -1
}

// MoveSlot moves slot from server from to server to while clients keep
// using it, as redis-cli --cluster reshard does: the destination marks it
// IMPORTING and the source MIGRATING, the keys move with MIGRATE a few at
// a time (pausing between batches, so that clients meet the slot half
// moved: keys already gone answer ASK, new keys are created on the
// destination), and then every node is told the new owner (SETSLOT NODE,
// destination first).
func (c *Cluster) MoveSlot(tb testing.TB, slot, from, to int, pause time.Duration) {
	tb.Helper()
	src, dst := c.Servers[from].Addr, c.Servers[to].Addr
	srcID, dstID := c.NodeID(tb, from), c.NodeID(tb, to)
	s := strconv.Itoa(slot)
	must(tb, dst, "CLUSTER", "SETSLOT", s, "IMPORTING", srcID)
	must(tb, src, "CLUSTER", "SETSLOT", s, "MIGRATING", dstID)
	host, port, _ := net.SplitHostPort(dst)
	for {
		time.Sleep(pause)
		keys, err := lines(src, "CLUSTER", "GETKEYSINSLOT", s, "2")
		if err != nil {
			tb.Fatalf("CLUSTER GETKEYSINSLOT %d on %s: %v", slot, src, err)
		}
		if len(keys) == 0 {
			break
		}
		args := append([]string{"MIGRATE", host, port, `""`, "0", "5000", "KEYS"}, keys...)
		if reply, err := Do(src, args...); err != nil || (reply != "+OK" && reply != "+NOKEY") {
			tb.Fatalf("MIGRATE %v from %s: %q, %v", keys, src, reply, err)
		}
	}
	must(tb, dst, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	must(tb, src, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	for i, other := range c.Servers {
		if i != from && i != to {
			must(tb, other.Addr, "CLUSTER", "SETSLOT", s, "NODE", dstID)
		}
	}
}

// must sends a command that answers +OK, or fails tb.
func must(tb testing.TB, addr string, args ...string) {
	tb.Helper()
	if reply, err := Do(addr, args...); err != nil || reply != "+OK" {
		tb.Fatalf("%v on %s: %q, %v", args, addr, reply, err)
	}
}

// lines sends a command whose reply is an array of bulk strings (CLUSTER
// GETKEYSINSLOT) and returns them. The strings must not contain line
// breaks, which client keys of these tests do not.
func lines(addr string, args ...string) ([]string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", strings.Join(args, " ")); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(head, "*") {
		return nil, fmt.Errorf("redistest: %s reply %q", args[0], head)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		s, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		out = append(out, strings.TrimRight(s, "\r\n"))
	}
	return out, nil
}
