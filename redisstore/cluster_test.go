package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// TestCluster starts a three-master Redis Cluster and runs every algorithm
// on many keys through both cluster clients: each key gets exactly its
// quota (so each decision ran as one single-slot script, or Redis would
// have refused it with CROSSSLOT), Reset works, and the keys spread over
// all three masters (the hash tag is the client key, not a constant).
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cl := redistest.StartCluster(t)
	addrs := cl.Addrs()

	crdb, rc := clusterClients(t, addrs)
	ctx := context.Background()
	const keys = 60
	rate := floodgate.PerMinute(3)

	for _, c := range []client{{"go-redis", goredisstore.New(crdb)}, {"rueidis", rueidisstore.New(rc)}} {
		for _, a := range algos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				p := prefix(t)
				l := a.mustNew(t, c.s, rate, patient, redisstore.WithPrefix(p))
				for i := 0; i < keys; i++ {
					key := fmt.Sprintf("client-%d", i)
					if i%7 == 0 {
						key += "{x}" // braces must not move the slot
					}
					for j := 0; j < rate.Limit; j++ {
						mustAllowed(t, l, key, 1, true)
					}
					mustAllowed(t, l, key, 1, false)
					if i%10 == 0 {
						if err := l.Reset(ctx, key); err != nil {
							t.Fatalf("Reset(%q): %v", key, err)
						}
						mustAllowed(t, l, key, 1, true)
					}
				}
				// Every master holds some of the keys.
				for _, s := range cl.Servers {
					info, err := redistest.Info(s.Addr, "keyspace")
					if err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(info, "db0:keys=") {
						t.Errorf("master %s holds no keys: %q", s.Addr, info)
					}
				}
			})
		}
	}
}

// TestClusterConcurrent: concurrent decisions over many keys on a
// three-master Cluster, batched by the adapters (a go-redis cluster
// pipeline splits by node, rueidis by slot), right after SCRIPT FLUSH on
// every master: each key is charged exactly once per decision.
func TestClusterConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cl := redistest.StartCluster(t)
	addrs := cl.Addrs()
	crdb, rc := clusterClients(t, addrs)
	ctx := context.Background()
	const keys, each = 64, 5
	for _, c := range []client{{"go-redis", goredisstore.New(crdb)}, {"rueidis", rueidisstore.New(rc)}} {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range cl.Servers {
				if reply, err := redistest.Do(s.Addr, "SCRIPT", "FLUSH"); err != nil || reply != "+OK" {
					t.Fatalf("SCRIPT FLUSH on %s: %q, %v", s.Addr, reply, err)
				}
			}
			l := algos[0].mustNew(t, c.s, floodgate.PerHour(100), patient, redisstore.WithPrefix(prefix(t)))
			var wg sync.WaitGroup
			errs := make(chan error, keys*each)
			for i := 0; i < keys*each; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if d, err := l.AllowN(ctx, fmt.Sprintf("client-%d", i%keys), 1); err != nil || !d.Allowed {
						errs <- fmt.Errorf("%+v, %v", d, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("a concurrent decision failed: %v", err)
			}
			for i := 0; i < keys; i++ {
				d, err := l.AllowN(ctx, fmt.Sprintf("client-%d", i), 0)
				if err != nil || d.Remaining != 100-each {
					t.Fatalf("client-%d after %d decisions: %+v, %v; want Remaining %d", i, each, d, err, 100-each)
				}
			}
		})
	}
}

// clusterClients returns a go-redis and a rueidis client of the cluster
// at addrs, closed when the test ends.
func clusterClients(t *testing.T, addrs []string) (*redis.ClusterClient, rueidis.Client) {
	t.Helper()
	crdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = crdb.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return crdb, rc
}
