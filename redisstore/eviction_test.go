package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// clientKeys returns the Redis keys a limiter with prefix p holds for the
// client key k (k without '%', '{' or '}').
func clientKeys(t *testing.T, rdb *redis.Client, p, k string) []string {
	t.Helper()
	keys, _, err := rdb.Scan(context.Background(), 0, p+":{"+k+"}:*", 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestSlidingLogLostKey (issue 18, item 3): a sliding log that loses part
// of its state in Redis — one of its keys evicted while another stays, as
// a maxmemory policy may do, or its sorted set missing a member the
// script keeps there — decides conservatively and never errors: a client
// that spent its quota stays denied. Before, the log kept a sorted
// set and a state key; with the set gone and the state left, every denial
// was an error ("holds fewer units than its state says") until the state
// expired, which fail-open turned into a pass and fail-closed into a 503.
func TestSlidingLogLostKey(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			l, err := redisstore.NewSlidingLog(c.s, floodgate.PerHour(5), patient, redisstore.WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			// lose spends the whole quota of k, applies loss to k's keys,
			// and checks the decisions that follow: all denied, none an
			// error.
			lose := func(k string, loss func(keys []string)) {
				t.Helper()
				mustAllowed(t, l, k, 5, true)
				loss(clientKeys(t, rdb, p, k))
				for i := 0; i < 5; i++ {
					d, err := l.AllowN(ctx, k, 1+i%2)
					if err != nil || d.Allowed {
						t.Fatalf("%s: decision %d after the loss: %+v, %v; want a denial", k, i, d, err)
					}
				}
			}
			// One key evicted while the others stay, for each key the log
			// writes (nothing to do if it writes one).
			mustAllowed(t, l, "probe", 1, true)
			for i := range clientKeys(t, rdb, p, "probe") {
				lose(fmt.Sprintf("evict-%d", i), func(keys []string) {
					if len(keys) > 1 {
						rdb.Del(ctx, keys[i])
					}
				})
			}
			// Any member that is not an entry removed from the sorted set.
			lose("members", func(keys []string) {
				for _, key := range keys {
					if rdb.Type(ctx, key).Val() != "zset" {
						continue
					}
					for _, m := range rdb.ZRange(ctx, key, 0, -1).Val() {
						if _, err := strconv.ParseInt(strings.SplitN(m, ":", 2)[0], 10, 64); err != nil {
							rdb.ZRem(ctx, key, m)
						}
					}
				}
			})
		})
	}
}

// TestEvictionNeverErrors (issue 18, item 3): on a server that evicts
// under maxmemory (allkeys-random: any key, any time), thousands of
// clients deciding on every algorithm never get an error: an eviction
// takes a client's whole state or none of it.
func TestEvictionNeverErrors(t *testing.T) {
	for _, policy := range []string{"allkeys-random"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", policy)
			for _, c := range clients(t, srv.Addr) {
				for _, a := range algos {
					t.Run(c.name+"/"+a.name, func(t *testing.T) {
						l := a.mustNew(t, c.s, floodgate.PerHour(5), patient, redisstore.WithPrefix(prefix(t)))
						before := infoField(t, srv.Addr, "stats", "evicted_keys")
						failed, first := evictionLoad(l, 3000)
						evicted := infoField(t, srv.Addr, "stats", "evicted_keys") - before
						t.Logf("%s: evicted_keys %d, %d failed decisions", policy, evicted, failed)
						if evicted == 0 {
							t.Fatal("nothing was evicted: the test did not test")
						}
						if failed > 0 {
							t.Fatalf("%d decisions failed under eviction; first: %v", failed, first)
						}
					})
				}
			}
		})
	}
}

// evictionLoad makes 8 decisions on each of clients keys, from 16
// goroutines, and returns the number that failed and the first error.
func evictionLoad(l limiter, clients int) (int64, error) {
	var failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	var next atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(8*clients) {
					return
				}
				key := "client-" + strconv.FormatInt(i%int64(clients), 10) + "-" + strings.Repeat("x", 300)
				if _, err := l.AllowN(context.Background(), key, 1); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	err, _ := first.Load().(error)
	return failed.Load(), err
}

// infoField returns an integer field of an INFO section.
func infoField(t *testing.T, addr, section, field string) int64 {
	t.Helper()
	info, err := redistest.Info(addr, section)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}
