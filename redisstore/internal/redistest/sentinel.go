package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which Sentinel monitors the master of a
// SentinelSet.
const SentinelMaster = "fgmaster"

// SentinelSet is one master, one replica and one Sentinel on loopback
// ports, started by StartSentinelSet.
type SentinelSet struct {
	Master, Replica, Sentinel *Server
}

// StartSentinelSet starts a master, a replica of it and a Sentinel
// monitoring it (quorum 1), waits until the replica is in sync and the
// Sentinel knows it (so that a failover can pick it), and stops them when
// tb ends. The Sentinel is redis-server in sentinel mode (--sentinel), so
// the redis-server package is all it needs. It skips tb when redis-server
// is not installed, or fails it with FLOODGATE_REQUIRE_SERVERS=1.
func StartSentinelSet(tb testing.TB) *SentinelSet {
	tb.Helper()
	s := &SentinelSet{Master: Start(tb)}
	host, port, _ := net.SplitHostPort(s.Master.Addr)
	s.Replica = Start(tb, "--replicaof", host, port)

	dir := tb.TempDir()
	sport, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	// Sentinel rewrites its configuration file, so it must be its own.
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %[3]s 2000\n"+
		"sentinel failover-timeout %[3]s 10000\n",
		sport, dir, SentinelMaster, host, port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	s.Sentinel = &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(sport)), port: sport, dir: dir,
		args: []string{conf, "--sentinel"},
	}
	if err := s.Sentinel.Restart(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Sentinel.Stop)

	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer func() { _ = sc.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := Info(s.Replica.Addr, "replication")
		replicas, _ := sc.Replicas(ctx, SentinelMaster).Result()
		if strings.Contains(info, "master_link_status:up") && knowsReplica(replicas, s.Replica.Addr) {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sentinel set not ready in 30 s: replica %q, sentinel's replicas %v", info, replicas)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// knowsReplica reports whether Sentinel lists addr as a healthy replica.
func knowsReplica(replicas []map[string]string, addr string) bool {
	for _, r := range replicas {
		if net.JoinHostPort(r["ip"], r["port"]) == addr && !strings.Contains(r["flags"], "down") &&
			!strings.Contains(r["flags"], "disconnected") {
			return true
		}
	}
	return false
}

// Failover asks the Sentinel to fail over (SENTINEL FAILOVER) and returns
// once the replica reports itself master.
func (s *SentinelSet) Failover(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer func() { _ = sc.Close() }()
	if err := sc.Failover(ctx, SentinelMaster).Err(); err != nil {
		tb.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := Info(s.Replica.Addr, "replication")
		if strings.Contains(info, "role:master") {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the replica did not become master in 30 s: %q", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
