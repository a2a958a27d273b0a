package redistest

import (
	"net"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a replica of master (--replicaof), waits until it
// reports its link to the master up (so that WAIT on the master counts
// it), and stops it when tb ends. Pause it to make a replica that is
// connected but acknowledges nothing.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	r := Start(tb, "--replicaof", host, port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := Info(r.Addr, "replication")
		if strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			tb.Fatalf("replica %s not in sync with %s in 30 s: %q", r.Addr, master.Addr, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
