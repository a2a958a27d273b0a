package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// The strategies are compared with the reference models step by step by
// the conformance suite (TestConformance, check RateChange). These tests
// hold what is Redis's own: a change reaches every instance, on one
// server and on a Cluster; an instance that has not read it yet never
// decides a converted key under the old rate; decisions under load see
// one rate or the other; a lost record is put back.

// changing is a Redis limiter as these tests use it.
type changing interface {
	limiter
	floodgate.RateSetter
	Rate() floodgate.Rate
}

// changingAlgos are the algorithms, the interval bucket among them.
var changingAlgos = []struct {
	name string
	new  func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error)
}{
	{"TokenBucket", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error) {
		return redisstore.NewTokenBucket(s, r, opts...)
	}},
	{"TokenBucket/IntervalRefill", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error) {
		return redisstore.NewTokenBucket(s, r, append(opts, redisstore.WithIntervalRefill())...)
	}},
	{"SlidingLog", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error) {
		return redisstore.NewSlidingLog(s, r, opts...)
	}},
	{"SlidingCounter", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error) {
		return redisstore.NewSlidingCounter(s, r, opts...)
	}},
}

// instancePair returns the clients of two instances, one through go-redis
// and one through rueidis, on one server or on one Cluster.
type instancePair func(t *testing.T) (a, b redisstore.Scripter)

func pairs(outer *testing.T) map[string]instancePair {
	out := map[string]instancePair{
		"server": func(t *testing.T) (redisstore.Scripter, redisstore.Scripter) {
			addr := redistest.Shared(t)
			return goRedis(t, addr).s, rueidisClient(t, addr).s
		},
	}
	if !testing.Short() {
		var once sync.Once
		var addrs []string
		out["cluster"] = func(t *testing.T) (redisstore.Scripter, redisstore.Scripter) {
			once.Do(func() { addrs = redistest.StartCluster(outer).Addrs() }) // for the whole test
			crdb, rc := clusterClients(t, addrs)
			return goredisstore.New(crdb), rueidisstore.New(rc)
		}
	}
	return out
}

// TestRateChangeReachesEveryInstance: a change made on one instance is
// the rate of the other as soon as SetRate returns, for a key drained
// before it (converted once, by whichever instance decides first) and a
// key never seen, and a change back made on the other reaches the first.
// On one server and on a three-master Cluster.
func TestRateChangeReachesEveryInstance(t *testing.T) {
	for where, pair := range pairs(t) {
		for _, alg := range changingAlgos {
			t.Run(where+"/"+alg.name, func(t *testing.T) {
				sa, sb := pair(t)
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(20 * time.Millisecond), patient}
				a, err := alg.new(sa, floodgate.PerHour(10), opts...)
				mustNot(t, err)
				b, err := alg.new(sb, floodgate.PerHour(10), opts...)
				mustNot(t, err)
				ctx := context.Background()
				for range 10 {
					mustAllowed(t, a, "drained", 1, true)
				}
				mustAllowed(t, b, "drained", 1, false)

				mustNot(t, a.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(20)}))
				if d := mustAllowed(t, b, "drained", 1, true); d.Limit != 20 || d.Remaining != 9 {
					t.Fatalf("b after a's upgrade: %+v, want Limit 20, Remaining 9", d)
				}
				if d := mustAllowed(t, b, "fresh", 1, true); d.Limit != 20 || d.Remaining != 19 {
					t.Fatalf("b, a fresh key: %+v, want Limit 20, Remaining 19", d)
				}
				if d := mustAllowed(t, a, "drained", 1, true); d.Remaining != 8 {
					t.Fatalf("a after b's decision: %+v, want Remaining 8 (converted once)", d)
				}
				if r := b.Rate(); r != floodgate.PerHour(20) {
					t.Fatalf("b.Rate() = %v", r)
				}

				mustNot(t, b.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(5)}))
				if d := mustAllowed(t, a, "drained", 1, false); d.Limit != 5 || d.Remaining != 0 {
					t.Fatalf("a after b's downgrade: %+v, want Limit 5, Remaining 0", d)
				}
				if d := mustAllowed(t, a, "fresh", 5, false); d.Limit != 5 {
					t.Fatalf("a, the key b spent 1 of: %+v, want Limit 5 and 4 left", d)
				}
			})
		}
	}
}

// TestRateChangeStaleInstance: an instance that has not read the record
// yet (its refresh interval not over) meets a key another instance has
// converted: it reads the record then and decides under the new rate,
// never under the old one, and from then on decides every key under it.
func TestRateChangeStaleInstance(t *testing.T) {
	addr := redistest.Shared(t)
	for _, alg := range changingAlgos {
		t.Run(alg.name, func(t *testing.T) {
			clock := &fakeClock{t0}
			p := prefix(t)
			a, err := alg.new(goRedis(t, addr).s, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
				redisstore.WithRateRefresh(time.Millisecond), patient)
			mustNot(t, err)
			b, err := alg.new(rueidisClient(t, addr).s, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
				redisstore.WithRateRefresh(time.Hour), patient)
			mustNot(t, err)
			mustAllowed(t, b, "warm", 1, true) // b reads the record (none) now, and not for an hour
			for range 10 {
				mustAllowed(t, a, "k", 1, true)
			}
			mustNot(t, a.SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(4)}))
			mustAllowed(t, a, "k", 0, true) // converted: 10 used of 4
			if d := mustAllowed(t, b, "k", 1, false); d.Limit != 4 || d.Remaining != 0 {
				t.Fatalf("the stale instance on a converted key: %+v, want Limit 4, Remaining 0", d)
			}
			if d := mustAllowed(t, b, "other", 1, true); d.Limit != 4 || d.Remaining != 3 {
				t.Fatalf("the instance once it read the record: %+v, want Limit 4, Remaining 3", d)
			}
		})
	}
}

// TestRateChangeUnderLoad: two instances spend a hot key from sixteen
// goroutines, and many cold keys, at a frozen clock, while one instance
// upgrades (or downgrades) the rate under KeepUsed. The hot key is
// allowed exactly the larger of the two quotas: no unit is given twice by
// a key converted twice, or decided under the old rate once converted.
func TestRateChangeUnderLoad(t *testing.T) {
	addr := redistest.Shared(t)
	for _, alg := range changingAlgos {
		for _, to := range []int{30, 10} {
			t.Run(fmt.Sprintf("%s/20_to_%d", alg.name, to), func(t *testing.T) {
				clock := &fakeClock{t0}
				p := prefix(t)
				var lims []changing
				for _, s := range []redisstore.Scripter{goRedis(t, addr).s, rueidisClient(t, addr).s} {
					l, err := alg.new(s, floodgate.PerHour(20), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
						redisstore.WithRateRefresh(5*time.Millisecond), patient)
					mustNot(t, err)
					lims = append(lims, l)
				}
				var allowed, denied, failed atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for g := range 16 {
					l := lims[g%2]
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							key := "hot"
							if i%2 == 1 {
								key = fmt.Sprintf("cold-%d-%d", g, i%64)
							}
							d, err := l.AllowN(context.Background(), key, 1)
							switch {
							case err != nil:
								failed.Add(1)
							case key != "hot":
							case d.Allowed:
								allowed.Add(1)
							default:
								denied.Add(1)
							}
						}
					}()
				}
				for denied.Load() < 10 {
					time.Sleep(time.Millisecond) // until the hot key is spent: the clock is frozen
				}
				mustNot(t, lims[0].SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(to)}))
				for d := denied.Load(); denied.Load() < d+50; {
					time.Sleep(time.Millisecond)
				}
				close(stop)
				wg.Wait()
				if failed.Load() != 0 || allowed.Load() != int64(max(20, to)) {
					t.Fatalf("hot key: %d allowed, %d failed across the change; want %d and none", allowed.Load(), failed.Load(), max(20, to))
				}
			})
		}
	}
}

// TestRateRecordPutBack: a record lost from Redis (deleted, or evicted
// under a maxmemory policy that may) is put back by the first instance
// that knows it and reads again, so the change is not undone: an
// instance built since, with the old rate, then decides under the new
// one.
func TestRateRecordPutBack(t *testing.T) {
	addr := redistest.Shared(t)
	clock := &fakeClock{t0}
	p := prefix(t)
	opts := []redisstore.Option{redisstore.WithPrefix(p), redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Millisecond), patient}
	a, err := redisstore.NewTokenBucket(goRedis(t, addr).s, floodgate.PerHour(10), opts...)
	mustNot(t, err)
	ctx := context.Background()
	mustNot(t, a.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(3)}))
	if _, err := redistest.Do(addr, "DEL", p+":rate:tb"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // a's refresh interval: not a refill, the clock is frozen
	mustAllowed(t, a, "k", 1, true)  // reads the record, finds none, puts it back
	b, err := redisstore.NewTokenBucket(rueidisClient(t, addr).s, floodgate.PerHour(10), opts...)
	mustNot(t, err)
	if d := mustAllowed(t, b, "fresh", 1, true); d.Limit != 3 {
		t.Fatalf("an instance built with the old rate after the record was lost and put back: %+v, want Limit 3", d)
	}
}

// TestSetRateRefused: an impossible change is refused before anything is
// written, with the constructor's errors, and the rate stays.
func TestSetRateRefused(t *testing.T) {
	addr := redistest.Shared(t)
	for _, alg := range changingAlgos {
		t.Run(alg.name, func(t *testing.T) {
			l, err := alg.new(goRedis(t, addr).s, floodgate.PerHour(10), redisstore.WithPrefix(prefix(t)), patient)
			mustNot(t, err)
			bad := []struct {
				c    floodgate.RateChange
				want error
			}{
				{floodgate.RateChange{Rate: floodgate.Rate{Limit: 0, Period: time.Second}}, floodgate.ErrInvalidRate},
				{floodgate.RateChange{Rate: floodgate.Rate{Limit: 1, Period: time.Nanosecond}}, floodgate.ErrInvalidRate},
				{floodgate.RateChange{Rate: floodgate.PerHour(5), Inherit: floodgate.Inherit(7)}, floodgate.ErrInvalidOption},
			}
			if alg.name == "SlidingLog" || alg.name == "SlidingCounter" {
				bad = append(bad, struct {
					c    floodgate.RateChange
					want error
				}{floodgate.RateChange{Rate: floodgate.PerHour(5), Burst: 3}, floodgate.ErrInvalidOption})
			}
			for _, b := range bad {
				if err := l.SetRate(context.Background(), b.c); !errors.Is(err, b.want) {
					t.Errorf("SetRate(%+v) = %v, want %v", b.c, err, b.want)
				}
			}
			if r := l.Rate(); r != floodgate.PerHour(10) {
				t.Fatalf("rate after refused changes: %v", r)
			}
		})
	}
}

func mustNot(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLeaseRateChange: leasing instances (WithLease) spend a hot key from
// sixteen goroutines at a frozen clock while one of them changes the
// rate. A change drops the leases taken under the old rate, in every
// instance by the time SetRate returns: the hot key is never allowed
// more than the larger quota, and what it loses is bounded by the
// leases dropped, a lease and half per instance.
func TestLeaseRateChange(t *testing.T) {
	addr := redistest.Shared(t)
	for _, alg := range changingAlgos {
		if alg.name != "TokenBucket" && alg.name != "SlidingCounter" {
			continue // the modes that lease
		}
		for _, to := range []int{80, 20} {
			t.Run(fmt.Sprintf("%s/40_to_%d", alg.name, to), func(t *testing.T) {
				clock := &fakeClock{t0}
				p := prefix(t)
				lease := redisstore.Lease{MaxShare: 4}
				var lims []changing
				for _, c := range leaseClients(t, addr) {
					l, err := alg.new(c.s, floodgate.PerHour(40), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
						redisstore.WithRateRefresh(5*time.Millisecond), redisstore.WithLease(lease), patient)
					mustNot(t, err)
					lims = append(lims, l)
				}
				var allowed, denied, failed atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for g := range 16 {
					l := lims[g%2]
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							d, err := l.AllowN(context.Background(), "hot", 1)
							switch {
							case err != nil:
								failed.Add(1)
							case d.Allowed:
								allowed.Add(1)
							default:
								denied.Add(1)
							}
						}
					}()
				}
				for denied.Load() < 10 {
					time.Sleep(time.Millisecond) // until the hot key is spent: the clock is frozen
				}
				mustNot(t, lims[0].SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(to)}))
				for d := denied.Load(); denied.Load() < d+50; {
					time.Sleep(time.Millisecond)
				}
				close(stop)
				wg.Wait()
				most := int64(max(40, to))
				lost := int64(len(lims)) * int64(max(40, to)/lease.MaxShare) * 3 / 2
				if failed.Load() != 0 || allowed.Load() > most || allowed.Load() < most-lost {
					t.Fatalf("hot key: %d allowed, %d failed across the change; want %d at most, %d at least, and no failure",
						allowed.Load(), failed.Load(), most, most-lost)
				}
				t.Logf("%d allowed of %d", allowed.Load(), most)
			})
		}
	}
}
