package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// leased is what a limiter in lease mode is.
type leased interface {
	limiter
	floodgate.Refunder
	LeaseStats() redisstore.LeaseStats
}

// leaseAlgo builds one algorithm that leases, on Redis and, as the
// oracle, in memory.
type leaseAlgo struct {
	name   string
	redis  func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (leased, error)
	memory func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error)
}

var leaseAlgos = []leaseAlgo{
	{"TokenBucket",
		func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (leased, error) {
			return redisstore.NewTokenBucket(s, r, opts...)
		},
		func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, floodgate.WithClock(now))
		}},
	{"SlidingCounter",
		func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (leased, error) {
			return redisstore.NewSlidingCounter(s, r, opts...)
		},
		func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewSlidingCounter(r, floodgate.WithClock(now))
		}},
}

// leaseClients are the two clients for the lease tests: like clients, but
// go-redis dials with a 2 s timeout instead of 200 ms, since a dial that
// times out fails the decision, and these tests are about decisions on a
// machine loaded with other builds.
func leaseClients(t testing.TB, addr string) []client {
	t.Helper()
	return []client{leaseGoRedis(t, addr), rueidisClient(t, addr)}
}

func leaseGoRedis(t testing.TB, addr string) client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64,
		DialTimeout: 2 * time.Second, DialerRetries: 1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return client{"go-redis", goredisstore.New(rdb)}
}

// leaseEpoch is where the lease tests' clocks start: on a whole second,
// so that every limiter created at it cuts the same counter windows.
var leaseEpoch = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// instances builds k limiters of a on s, all on one prefix and one clock:
// k instances of one service.
func (a leaseAlgo) instances(t testing.TB, k int, s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) []leased {
	t.Helper()
	out := make([]leased, k)
	for i := range out {
		l, err := a.redis(s, r, append([]redisstore.Option{patient}, opts...)...)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		out[i] = l
	}
	return out
}

// oracle returns a's exact in-memory limiter on clock.
func (a leaseAlgo) oracle(t testing.TB, r floodgate.Rate, clock interface{ Now() time.Time }) floodgate.Limiter {
	t.Helper()
	o, err := a.memory(r, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// sumStats adds the lease counts of ls.
func sumStats(ls []leased) redisstore.LeaseStats {
	var s redisstore.LeaseStats
	for _, l := range ls {
		x := l.LeaseStats()
		s.LocalDecisions += x.LocalDecisions
		s.LocalUnits += x.LocalUnits
		s.Leases += x.Leases
		s.LeasedUnits += x.LeasedUnits
		s.EarlyLeases += x.EarlyLeases
		s.ReturnedUnits += x.ReturnedUnits
		s.StrandedUnits += x.StrandedUnits
		s.LocalRefunds += x.LocalRefunds
		s.AheadUnits += x.AheadUnits
		s.Keys += x.Keys
		s.MaxKeys += x.MaxKeys
	}
	return s
}

// TestLeaseNeverOverExactLimiter plays four instances that lease, on one
// clock, through random traffic on three keys: bursts at one instant,
// steady streams, pauses that let leased units run out, costs of one to
// five. Every request any instance allows is replayed, at the same time,
// into one exact in-memory limiter of the same rate: it must allow each,
// or the instances together let more through than the limit. The run
// must also have leased and decided locally, or it proves nothing.
func TestLeaseNeverOverExactLimiter(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 120, Period: time.Second}
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				for seed := uint64(1); seed <= 3; seed++ {
					clock := floodgatetest.NewClock(leaseEpoch)
					insts := a.instances(t, 4, c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)),
						redisstore.WithLease(redisstore.Lease{MaxShare: 4, Horizon: 30 * time.Millisecond}))
					oracle := a.oracle(t, rate, clock)
					allowed := replayRandom(t, seed, insts, oracle, clock, 3000, nil)
					st := sumStats(insts)
					t.Logf("seed %d: %d units allowed, %+v", seed, allowed, st)
					if st.Leases == 0 || st.EarlyLeases == 0 || st.LocalDecisions < 500 {
						t.Fatalf("seed %d: the traffic leased too little to test anything: %+v", seed, st)
					}
				}
			})
		}
	}
}

// TestLeaseNeverOverTickingClock is TestLeaseNeverOverExactLimiter on a
// clock that moves 50 µs at every reading, so that round trips take time:
// leases are then refreshed early, while the current one still holds
// units, and both are in use side by side.
func TestLeaseNeverOverTickingClock(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 2000, Period: time.Second}
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				clock := &tickingClock{c: floodgatetest.NewClock(leaseEpoch), tick: 50 * time.Microsecond}
				insts := a.instances(t, 3, c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)),
					redisstore.WithLease(redisstore.Lease{MaxShare: 4}))
				oracle := a.oracle(t, rate, clock)
				allowed := replayRandom(t, 5, insts, oracle, clock.c, 4000, nil)
				t.Logf("%d units allowed, %+v", allowed, sumStats(insts))
				if st := sumStats(insts); st.EarlyLeases < 20 {
					t.Fatalf("%d leases taken early, want at least 20: %+v", st.EarlyLeases, st)
				}
			})
		}
	}
}

// tickingClock is a fake clock that moves tick at every reading.
type tickingClock struct {
	c    *floodgatetest.Clock
	tick time.Duration
}

func (k *tickingClock) Now() time.Time { return k.c.Advance(k.tick) }

// replayRandom runs steps random requests against insts, checking each
// allowed one against oracle, calls each (if not nil) after every step,
// and returns the units allowed.
func replayRandom(t *testing.T, seed uint64, insts []leased, oracle floodgate.Limiter, clock *floodgatetest.Clock, steps int, each func(step int)) int {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	keys := []string{"a", "b", "c"}
	allowed := 0
	for i := 0; i < steps; i++ {
		switch x := rng.IntN(100); {
		case x < 55: // a burst: same instant
		case x < 90:
			clock.Advance(time.Duration(1+rng.IntN(4)) * time.Millisecond)
		case x < 98:
			clock.Advance(time.Duration(10+rng.IntN(60)) * time.Millisecond)
		default: // a pause: leased units run out
			clock.Advance(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
		}
		key := keys[min(rng.IntN(5), 2)]
		n := 1
		if rng.IntN(10) == 0 {
			n = 1 + rng.IntN(5)
		}
		d, err := insts[rng.IntN(len(insts))].AllowN(ctx, key, n)
		if err != nil {
			t.Fatalf("seed %d step %d: %v", seed, i, err)
		}
		if each != nil {
			each(i)
		}
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				t.Fatalf("seed %d step %d: denied with RetryAfter %v", seed, i, d.RetryAfter)
			}
			continue
		}
		allowed += n
		if od, err := oracle.AllowN(ctx, key, n); err != nil || !od.Allowed {
			t.Fatalf("seed %d step %d, %v after the start: %q allowed %d units that the exact limiter denies (%+v, %v): over the limit",
				seed, i, clock.Now().Sub(leaseEpoch), key, n, od, err)
		}
	}
	return allowed
}

// TestLeaseConcurrentNeverOver: goroutines of four instances hit two keys
// at once, in rounds at frozen instants with the clock moved between
// them. Each round's allowed units are replayed into the exact limiter,
// which must allow them all at that instant.
func TestLeaseConcurrentNeverOver(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 200, Period: time.Second}
	ctx := context.Background()
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				clock := floodgatetest.NewClock(leaseEpoch)
				insts := a.instances(t, 4, c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)),
					redisstore.WithLease(redisstore.Lease{MaxShare: 4}))
				oracle := a.oracle(t, rate, clock)
				rng := rand.New(rand.NewPCG(7, 7))
				for round := 0; round < 40; round++ {
					got := concurrentRound(t, insts, []string{"x", "y"}, 8, 30)
					for key, n := range got {
						if n == 0 {
							continue
						}
						if od, err := oracle.AllowN(ctx, key, n); err != nil || !od.Allowed {
							t.Fatalf("round %d: %d units of %q allowed at one instant, which the exact limiter denies (%+v, %v)", round, n, key, od, err)
						}
					}
					clock.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				}
				if st := sumStats(insts); st.Leases == 0 || st.EarlyLeases == 0 || st.LocalDecisions == 0 {
					t.Fatalf("no lease was used: %+v", st)
				}
			})
		}
	}
}

// concurrentRound sends attempts single-unit requests per goroutine,
// goroutines per instance, spread over keys, and returns the units
// allowed per key. An error fails t.
func concurrentRound(t *testing.T, insts []leased, keys []string, goroutines, attempts int) map[string]int {
	t.Helper()
	got, errs := roundAllowed(insts, keys, goroutines, attempts, nil)
	for _, err := range errs {
		t.Fatal(err)
	}
	return got
}

// roundAllowed is concurrentRound for callers off the test's goroutine:
// it returns the failed decisions' errors instead of failing a test. cost
// gives the units of the j-th request of goroutine g of instance i (nil:
// one each).
func roundAllowed(insts []leased, keys []string, goroutines, attempts int, cost func(i, g, j int) int) (map[string]int, []error) {
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, len(insts)*goroutines)
	for i, l := range insts {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < attempts; j++ {
					key, n := keys[(i+g+j)%len(keys)], 1
					if cost != nil {
						n = cost(i, g, j)
					}
					d, err := l.AllowN(context.Background(), key, n)
					if err != nil {
						errs <- fmt.Errorf("instance %d: %w", i, err)
						return
					}
					if d.Allowed {
						mu.Lock()
						got[key] += n
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return got, out
}

// A leased token bucket's lease mark outlives a plain decision: the
// units an instance still holds keep their slots through a refund. At
// 10 a second (one slot every 100 ms, burst 10): instance 0 allows 5;
// at 450 ms instance 1 allows 1 and then 1 more with a lease of 2, whose
// second unit it holds; instance 2's first decision, by the plain
// script, wrote the bucket without the mark; instance 0's refund of its
// 5 then moved the bucket back to full, freeing the held unit's slot
// too, so that instance 2 could take 10 while instance 1 still allowed
// its unit: 11 where the exact bucket, refunded as well, allows 10.
// Every grant is replayed on the exact bucket.
func TestLeaseTokenBucketRefundKeepsMark(t *testing.T) {
	addr := redistest.Shared(t)
	r := floodgate.Rate{Limit: 10, Period: time.Second}
	for _, c := range leaseClients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(leaseEpoch)
			insts := leaseAlgos[0].instances(t, 3, c.s, r, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)),
				redisstore.WithLease(redisstore.Lease{MaxShare: 2}))
			oracle := leaseAlgos[0].oracle(t, r, clock)
			ctx := context.Background()
			allow := func(i, n int) bool {
				t.Helper()
				d, err := insts[i].AllowN(ctx, "k", n)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					if od, _ := oracle.AllowN(ctx, "k", n); !od.Allowed {
						t.Fatalf("at %v: instance %d allowed %d where the exact bucket denies (%+v)", clock.Now().Sub(leaseEpoch), i, n, od)
					}
				}
				return d.Allowed
			}
			if !allow(0, 5) {
				t.Fatal("the first 5 denied")
			}
			clock.Advance(450 * time.Millisecond)
			if !allow(1, 1) || !allow(1, 1) || !allow(2, 1) {
				t.Fatal("a request within the burst denied")
			}
			if s := insts[1].LeaseStats(); s.LeasedUnits != 1 {
				t.Fatalf("instance 1 holds no leased unit, the test proves nothing: %+v", s)
			}
			if err := insts[0].RefundN(ctx, "k", 5); err != nil {
				t.Fatal(err)
			}
			if err := oracle.(floodgate.Refunder).RefundN(ctx, "k", 5); err != nil {
				t.Fatal(err)
			}
			for range 10 {
				allow(2, 1)
			}
			allow(1, 1)
		})
	}
}

// One WithLease value builds several limiters at once (a service's
// options slice, shared by constructors on several goroutines): each
// fills in the defaults on its own copy. Before, they wrote the Option's
// one captured Lease, a data race under -race (found by the checker's
// Lease targets, which share one option between two targets run in
// parallel).
func TestLeaseOptionSharedByConstructors(t *testing.T) {
	opt := redisstore.WithLease(redisstore.Lease{MaxShare: 4})
	var wg sync.WaitGroup
	stats := make([]redisstore.LeaseStats, 8)
	for i := range stats {
		wg.Go(func() {
			sc, err := redisstore.NewSlidingCounter(noServer{}, floodgate.Rate{Limit: 20, Period: time.Second}, opt)
			if err != nil {
				t.Error(err)
				return
			}
			stats[i] = sc.LeaseStats()
		})
	}
	wg.Wait()
	for i, s := range stats {
		if s.MaxKeys != redisstore.DefaultLeaseKeys {
			t.Fatalf("limiter %d: MaxKeys %d, want the default %d", i, s.MaxKeys, redisstore.DefaultLeaseKeys)
		}
	}
}
