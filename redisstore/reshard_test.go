package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/internal/scriptbatch"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// reshardKeys returns n client keys whose hash slots are distinct and all
// served by one node, and that node's index.
func reshardKeys(t *testing.T, cl *redistest.Cluster, n int) ([]string, []int, int) {
	t.Helper()
	var keys []string
	var slots []int
	seen := map[int]bool{}
	owner := -1
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("c-%d", i)
		slot := cl.KeySlot(t, "{"+k+"}")
		if seen[slot] {
			continue
		}
		o := cl.Owner(t, slot)
		if owner == -1 {
			owner = o
		}
		if o != owner {
			continue
		}
		seen[slot] = true
		keys, slots = append(keys, k), append(slots, slot)
	}
	return keys, slots, owner
}

// reshardTally counts one run's decisions per key.
type reshardTally struct {
	attempts, allowed []atomic.Int64
	failed            atomic.Int64
	slowest           atomic.Int64 // ns
	mu                sync.Mutex
	errs              []error // the first few failures
}

func (r *reshardTally) fail(err error) {
	if r.failed.Add(1) <= 5 {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
}

// TestClusterReshard (issue 18, item 10) moves 20 hash slots from one
// master of a three-master Cluster to another, the steps redis-cli
// --cluster reshard takes (SETSLOT IMPORTING and MIGRATING, MIGRATE key by
// key, SETSLOT NODE), while 8 goroutines keep deciding on 20 client keys
// of those slots, for every algorithm on both clients. Every decision must
// succeed, each key must be allowed exactly min(limit, attempts) times
// (never over the limit) and charged exactly what was allowed (never
// twice). Before, the sliding log and counter kept a client's state in
// two keys, and a script over two keys of a slot half moved fails with
// TRYAGAIN (or, on a new client, on the importing node).
func TestClusterReshard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cl := redistest.StartCluster(t)
	crdb, rc := clusterClients(t, cl.Addrs())
	keys, slots, owner := reshardKeys(t, cl, 20)
	const limit = 300
	frozen := func() time.Time { return t0 } // no refill, no window boundary
	for _, c := range []client{{"go-redis", goredisstore.New(crdb)}, {"rueidis", rueidisstore.New(rc)}} {
		for _, a := range algos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				l := a.mustNew(t, c.s, floodgate.Rate{Limit: limit, Period: time.Hour},
					redisstore.WithPrefix(prefix(t)), redisstore.WithClock(frozen), patient)
				to := (owner + 1) % 3
				tally := runDuringReshard(t, l, keys, func() {
					for _, s := range slots {
						cl.MoveSlot(t, s, owner, to, 10*time.Millisecond)
					}
				})
				owner = to
				checkReshardTally(t, l, keys, limit, tally)
			})
		}
	}
}

// runDuringReshard makes decisions on keys from 8 goroutines until move
// has returned, and tallies them.
func runDuringReshard(t *testing.T, l limiter, keys []string, move func()) *reshardTally {
	t.Helper()
	return runDuringReshardWith(t, l, keys, 8, move)
}

// runDuringReshardWith is runDuringReshard from the given number of
// goroutines.
func runDuringReshardWith(t *testing.T, l limiter, keys []string, goroutines int, move func()) *reshardTally {
	t.Helper()
	tally := &reshardTally{attempts: make([]atomic.Int64, len(keys)), allowed: make([]atomic.Int64, len(keys))}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(keys)
				tally.attempts[k].Add(1)
				start := time.Now()
				d, err := l.AllowN(context.Background(), keys[k], 1)
				for took := int64(time.Since(start)); ; {
					was := tally.slowest.Load()
					if took <= was || tally.slowest.CompareAndSwap(was, took) {
						break
					}
				}
				switch {
				case err != nil:
					tally.fail(fmt.Errorf("%s: %w", keys[k], err))
				case d.Allowed:
					tally.allowed[k].Add(1)
				}
			}
		}()
	}
	start := time.Now()
	move()
	close(stop)
	wg.Wait()
	t.Logf("slots moved in %v", time.Since(start).Round(time.Millisecond))
	return tally
}

// checkReshardTally fails t on any failed decision, and on a key allowed
// other than min(limit, attempts) times or charged other than it was
// allowed.
func checkReshardTally(t *testing.T, l limiter, keys []string, limit int, tally *reshardTally) {
	t.Helper()
	var attempts int64
	for i := range keys {
		attempts += tally.attempts[i].Load()
	}
	t.Logf("%d decisions, %d failed, slowest %v", attempts, tally.failed.Load(), time.Duration(tally.slowest.Load()).Round(time.Millisecond))
	if n := tally.failed.Load(); n > 0 {
		t.Fatalf("%d of %d decisions failed during the reshard; first: %v", n, attempts, tally.errs)
	}
	for i, k := range keys {
		tried, allowed := tally.attempts[i].Load(), tally.allowed[i].Load()
		if allowed != min(int64(limit), tried) {
			t.Errorf("%s: %d allowed of %d attempts, want %d", k, allowed, tried, min(int64(limit), tried))
		}
		d, err := l.AllowN(context.Background(), k, 0)
		if err != nil || int64(d.Remaining) != int64(limit)-allowed {
			t.Errorf("%s after %d allowed: %+v, %v; want Remaining %d (each charged once)", k, allowed, d, err, int64(limit)-allowed)
		}
	}
}

// TestClusterReshardBatched is TestClusterReshard with four client keys
// in each of five moving slots and 16 goroutines, so that the adapters
// send the decisions of one slot as one batch script: a batch that meets
// its slot half moved is answered TRYAGAIN (some of its keys are gone) or
// ASK, did not run, and its decisions are sent again alone. Every
// decision must succeed, each key be allowed exactly min(limit, attempts)
// times and charged exactly what was allowed.
func TestClusterReshardBatched(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cl := redistest.StartCluster(t)
	crdb, rc := clusterClients(t, cl.Addrs())
	// Client keys grouped by slot, five slots of one node, four keys each.
	bySlot := map[int][]string{}
	var slots []int
	owner := -1
	for i := 0; len(slots) < 5; i++ {
		k := fmt.Sprintf("c-%d", i)
		s := scriptbatch.Slot(k)
		if len(bySlot[s]) == 0 && len(bySlot) >= 40 {
			continue // enough candidate slots; fill those
		}
		bySlot[s] = append(bySlot[s], k)
		if len(bySlot[s]) == 4 {
			if want := cl.KeySlot(t, "{"+k+"}"); want != s {
				t.Fatalf("slot of %q: %d, the server says %d", k, s, want)
			}
			o := cl.Owner(t, s)
			if owner == -1 {
				owner = o
			}
			if o == owner {
				slots = append(slots, s)
			}
		}
	}
	var keys []string
	for _, s := range slots {
		keys = append(keys, bySlot[s][:4]...)
	}
	const limit = 300
	frozen := func() time.Time { return t0 }
	for _, c := range []client{{"go-redis", goredisstore.New(crdb)}, {"rueidis", rueidisstore.New(rc)}} {
		for _, a := range algos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				l := a.mustNew(t, c.s, floodgate.Rate{Limit: limit, Period: time.Hour},
					redisstore.WithPrefix(prefix(t)), redisstore.WithClock(frozen), patient)
				to := (owner + 1) % 3
				tally := runDuringReshardWith(t, l, keys, 16, func() {
					for _, s := range slots {
						cl.MoveSlot(t, s, owner, to, 10*time.Millisecond)
					}
				})
				owner = to
				checkReshardTally(t, l, keys, limit, tally)
				// How the batches met the move, over the run so far
				// (TRYAGAIN: only a batch script, of several keys, gets it).
				stats := map[string]int{}
				for _, srv := range cl.Servers {
					info, err := redistest.Info(srv.Addr, "errorstats")
					if err != nil {
						t.Fatal(err)
					}
					for _, line := range strings.Split(info, "\n") {
						var n int
						kind, count, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "errorstat_"), ":count=")
						if _, err := fmt.Sscan(count, &n); ok && err == nil {
							stats[kind] += n
						}
					}
				}
				t.Logf("errors the masters answered so far: %v", stats)
			})
		}
	}
}
