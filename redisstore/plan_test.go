package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// These tests hold issue 29's tenth finding: a plan change on Redis
// follows PlanConfig.Inherit as it does in memory.

// planAlgo builds one algorithm's plans on Redis (every plan on one
// prefix) and in memory.
type planAlgo struct {
	name   string
	redis  func(s redisstore.Scripter, p floodgate.Plan, opts ...redisstore.Option) (floodgate.Limiter, error)
	memory func(opts ...floodgate.Option) func(floodgate.Plan) (floodgate.Limiter, error)
}

var planAlgos = []planAlgo{
	{"TokenBucket", func(s redisstore.Scripter, p floodgate.Plan, opts ...redisstore.Option) (floodgate.Limiter, error) {
		return redisstore.NewTokenBucket(s, p.Rate, opts...)
	}, floodgate.TokenBucketPlans},
	{"TokenBucket/IntervalRefill", func(s redisstore.Scripter, p floodgate.Plan, opts ...redisstore.Option) (floodgate.Limiter, error) {
		return redisstore.NewTokenBucket(s, p.Rate, append(opts, redisstore.WithIntervalRefill())...)
	}, func(opts ...floodgate.Option) func(floodgate.Plan) (floodgate.Limiter, error) {
		return floodgate.TokenBucketPlans(append(opts, floodgate.WithIntervalRefill())...)
	}},
	{"SlidingLog", func(s redisstore.Scripter, p floodgate.Plan, opts ...redisstore.Option) (floodgate.Limiter, error) {
		return redisstore.NewSlidingLog(s, p.Rate, opts...)
	}, floodgate.SlidingLogPlans},
	{"SlidingCounter", func(s redisstore.Scripter, p floodgate.Plan, opts ...redisstore.Option) (floodgate.Limiter, error) {
		return redisstore.NewSlidingCounter(s, p.Rate, opts...)
	}, floodgate.SlidingCounterPlans},
}

// switchable is a resolver whose plan for every key is set by the test.
type switchable struct {
	plan atomic.Pointer[floodgate.Plan]
}

func (s *switchable) set(p floodgate.Plan) { s.plan.Store(&p) }

func (s *switchable) resolve(context.Context, string) (floodgate.Plan, error) {
	return *s.plan.Load(), nil
}

var (
	freePlan = floodgate.Plan{Name: "free", Rate: floodgate.PerHour(3)}
	proPlan  = floodgate.Plan{Name: "pro", Rate: floodgate.PerHour(10)}
)

// TestPlanChangeOnRedisFollowsInherit walks one key through free (3 an
// hour), an upgrade to pro (10), a downgrade and an upgrade again, on a
// Redis PlanLimiter and an in-memory one side by side, under KeepUsed
// and ScaleUsed: every decision must agree (Allowed, Limit, Remaining).
// The limiters' clock is frozen; only the plan cache's moves, so that
// the cached plan is looked up again. Before, the Redis bucket read its
// state under the new plan as it stood: under KeepUsed the upgrade of a
// key that had spent 2 of 3 gave 3 more instead of 8 (the bucket kept
// the share used), and under ScaleUsed the windows and the interval
// bucket gave 8 instead of 3 (they kept the units used).
func TestPlanChangeOnRedisFollowsInherit(t *testing.T) {
	addr := redistest.Shared(t)
	for _, cl := range clients(t, addr) {
		for _, alg := range planAlgos {
			for _, how := range []floodgate.Inherit{floodgate.KeepUsed, floodgate.ScaleUsed} {
				t.Run(fmt.Sprintf("%s/%s/%v", cl.name, alg.name, how), func(t *testing.T) {
					limClock := &fakeClock{t0}
					cacheClock := &fakeClock{t0}
					var plans switchable
					plans.set(freePlan)
					p := prefix(t)
					onRedis, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
						Resolve: plans.resolve,
						New: func(plan floodgate.Plan) (floodgate.Limiter, error) {
							return alg.redis(cl.s, plan, redisstore.WithPrefix(p), redisstore.WithClock(limClock.Now), patient)
						},
						CacheTTL: time.Minute, Clock: cacheClock.Now, Inherit: how,
					})
					mustNot(t, err)
					inMemory, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
						Resolve:  plans.resolve,
						New:      alg.memory(floodgate.WithClock(limClock.Now)),
						CacheTTL: time.Minute, Clock: cacheClock.Now, Inherit: how,
					})
					mustNot(t, err)
					ctx := context.Background()
					step := func(what string, tries int) {
						t.Helper()
						for i := range tries {
							got, err1 := onRedis.Allow(ctx, "ann")
							want, err2 := inMemory.Allow(ctx, "ann")
							if err1 != nil || err2 != nil || got.Allowed != want.Allowed || got.Limit != want.Limit || got.Remaining != want.Remaining {
								t.Fatalf("%s, decision %d: Redis %+v (%v), memory %+v (%v)", what, i+1, got, err1, want, err2)
							}
						}
					}
					change := func(to floodgate.Plan) {
						plans.set(to)
						cacheClock.t = cacheClock.t.Add(time.Minute) // the cached plan is looked up again
					}
					step("free", 2)
					change(proPlan)
					step("upgraded to pro", 12)
					change(freePlan)
					step("downgraded to free", 2)
					change(proPlan)
					step("pro again", 2)
				})
			}
		}
	}
}

// TestPlanFlipsOnRedisUnderLoad is finding 2's outside check on Redis:
// two instances (PlanLimiters, one per client) decide one key from four
// goroutines each while its plan flips between free (3) and pro (10)
// under KeepUsed, on a frozen clock: whatever the key spent stays spent,
// so it is never allowed more than pro's 10 in all.
func TestPlanFlipsOnRedisUnderLoad(t *testing.T) {
	addr := redistest.Shared(t)
	for _, alg := range planAlgos {
		t.Run(alg.name, func(t *testing.T) {
			limClock := &fakeClock{t0}
			var plans switchable
			plans.set(freePlan)
			p := prefix(t)
			var lims []*floodgate.PlanLimiter
			for _, cl := range clients(t, addr) {
				l, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
					Resolve: plans.resolve,
					New: func(plan floodgate.Plan) (floodgate.Limiter, error) {
						return alg.redis(cl.s, plan, redisstore.WithPrefix(p), redisstore.WithClock(limClock.Now), patient)
					},
					CacheTTL: time.Millisecond, // real time: the plan is looked up again every millisecond
				})
				mustNot(t, err)
				lims = append(lims, l)
			}
			var allowed, failed atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
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
						d, err := l.Allow(context.Background(), "ann")
						switch {
						case err != nil:
							failed.Add(1)
						case d.Allowed:
							allowed.Add(1)
						}
					}
				}()
			}
			for i := range 200 {
				plans.set([]floodgate.Plan{proPlan, freePlan}[i%2])
				time.Sleep(time.Millisecond) // a flip a millisecond: not a refill, the limiters' clock is frozen
			}
			close(stop)
			wg.Wait()
			if failed.Load() != 0 || allowed.Load() > 10 || allowed.Load() < 3 {
				t.Fatalf("%d allowed, %d failed while the plan flipped; want 3 to 10 allowed (10 once pro was seen) and none failed",
					allowed.Load(), failed.Load())
			}
			t.Logf("%d allowed", allowed.Load())
		})
	}
}

// TestPlanChangesMatchMemoryRandom drives random traffic on a few keys
// through a Redis PlanLimiter and an in-memory one on one fake timeline,
// switching the keys between three plans of one period (a token bucket's
// bursts other than its limits), under KeepUsed and ScaleUsed: every
// decision must agree. The conversions run in the scripts, with limb
// arithmetic where the products pass 2^53; this holds them to the
// in-memory arithmetic on fractions, refills and debts.
func TestPlanChangesMatchMemoryRandom(t *testing.T) {
	addr := redistest.Shared(t)
	s := goRedis(t, addr).s
	plans := []floodgate.Plan{
		{Name: "a", Rate: floodgate.Rate{Limit: 3, Period: time.Hour}},
		{Name: "b", Rate: floodgate.Rate{Limit: 10, Period: time.Hour}, Burst: 14},
		{Name: "c", Rate: floodgate.Rate{Limit: 7, Period: time.Hour}, Burst: 2},
	}
	for _, alg := range planAlgos {
		for _, how := range []floodgate.Inherit{floodgate.KeepUsed, floodgate.ScaleUsed} {
			t.Run(fmt.Sprintf("%s/%v", alg.name, how), func(t *testing.T) {
				rng := rand.New(rand.NewSource(29))
				limClock := &fakeClock{t0}
				cacheClock := &fakeClock{t0}
				var mu sync.Mutex
				current := map[string]floodgate.Plan{}
				resolve := func(_ context.Context, key string) (floodgate.Plan, error) {
					mu.Lock()
					defer mu.Unlock()
					return current[key], nil
				}
				window := alg.name == "SlidingLog" || alg.name == "SlidingCounter"
				planOf := func(i int) floodgate.Plan {
					p := plans[i]
					if window {
						p.Burst = 0
					}
					return p
				}
				for _, k := range []string{"x", "y"} {
					current[k] = planOf(0)
				}
				p := prefix(t)
				onRedis, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
					Resolve: resolve,
					New: func(plan floodgate.Plan) (floodgate.Limiter, error) {
						opts := []redisstore.Option{redisstore.WithPrefix(p), redisstore.WithClock(limClock.Now), patient}
						if plan.Burst > 0 {
							opts = append(opts, redisstore.WithBurst(plan.Burst))
						}
						return alg.redis(s, plan, opts...)
					},
					CacheTTL: time.Minute, Clock: cacheClock.Now, Inherit: how,
				})
				mustNot(t, err)
				inMemory, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
					Resolve: resolve, New: alg.memory(floodgate.WithClock(limClock.Now)),
					CacheTTL: time.Minute, Clock: cacheClock.Now, Inherit: how,
				})
				mustNot(t, err)
				ctx := context.Background()
				// Every plan's limiter built at t0: with WithClock a Redis
				// counter's windows start at its limiter's creation, and
				// one built later would cut time elsewhere.
				for i := range plans {
					key := fmt.Sprint("warm-", i)
					current[key] = planOf(i)
					for _, l := range []*floodgate.PlanLimiter{onRedis, inMemory} {
						if _, err := l.AllowN(ctx, key, 0); err != nil {
							t.Fatal(err)
						}
					}
				}
				for i := range 400 {
					key := []string{"x", "y"}[rng.Intn(2)]
					switch r := rng.Intn(10); {
					case r == 0:
						mu.Lock()
						current[key] = planOf(rng.Intn(len(plans)))
						mu.Unlock()
						cacheClock.t = cacheClock.t.Add(time.Minute)
					case r < 3:
						limClock.t = limClock.t.Add(time.Duration(rng.Int63n(int64(12*time.Minute)/1000)) * time.Microsecond)
					}
					n := 1 + rng.Intn(2)
					got, err1 := onRedis.AllowN(ctx, key, n)
					want, err2 := inMemory.AllowN(ctx, key, n)
					if (err1 == nil) != (err2 == nil) || got.Allowed != want.Allowed || got.Limit != want.Limit || got.Remaining != want.Remaining {
						t.Fatalf("step %d, %s n=%d on %s: Redis %+v (%v), memory %+v (%v)", i, key, n, current[key].Name, got, err1, want, err2)
					}
				}
			})
		}
	}
}

// planDecider is a Redis limiter as a PlanLimiter calls it.
type planDecider interface {
	AllowPlanN(ctx context.Context, key string, n int, how floodgate.Inherit) (floodgate.Decision, error)
}

// TestAllowPlanNAcrossPeriods: AllowPlanN called on limiters of one
// prefix but different periods (which a PlanLimiter refuses, and a
// caller of its own may do) converts in Go, as SetRate does, rather than
// in the script: a key that spent 2 of 3 an hour has 8 of 10 a day left
// under KeepUsed, and 10 of 10 a day are then spent. A cost of another
// strategy is refused.
func TestAllowPlanNAcrossPeriods(t *testing.T) {
	addr := redistest.Shared(t)
	hourly, daily := floodgate.Plan{Rate: floodgate.PerHour(3)}, floodgate.Plan{Rate: floodgate.Rate{Limit: 10, Period: 24 * time.Hour}}
	for _, cl := range clients(t, addr) {
		for _, alg := range planAlgos {
			t.Run(cl.name+"/"+alg.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now), patient}
				var inGo atomic.Int64 // replies asking the client to convert (prelude_rate.lua)
				counted := hookScripter{cl.s, func(r []int64) {
					if len(r) > 1 && r[0] == -3 {
						inGo.Add(1)
					}
				}}
				a, err := alg.redis(counted, hourly, opts...)
				mustNot(t, err)
				b, err := alg.redis(counted, daily, opts...)
				mustNot(t, err)
				ctx := context.Background()
				if _, err := a.(planDecider).AllowPlanN(ctx, "k", 1, floodgate.AddDifference); !errors.Is(err, floodgate.ErrInvalidOption) {
					t.Fatalf("AllowPlanN under AddDifference: %v, want ErrInvalidOption", err)
				}
				for range 2 {
					if d, err := a.(planDecider).AllowPlanN(ctx, "k", 1, floodgate.KeepUsed); err != nil || !d.Allowed {
						t.Fatalf("hourly: %+v, %v", d, err)
					}
				}
				allowed := 0
				for range 12 {
					d, err := b.(planDecider).AllowPlanN(ctx, "k", 1, floodgate.KeepUsed)
					mustNot(t, err)
					if d.Allowed {
						allowed++
					}
				}
				if allowed != 8 {
					t.Fatalf("daily after 2 of 3 hourly: %d allowed, want 8 (KeepUsed)", allowed)
				}
				// The log converts in its script whatever the periods.
				if want := alg.name != "SlidingLog"; (inGo.Load() > 0) != want {
					t.Fatalf("%d conversions asked of the client, want some: %v", inGo.Load(), want)
				}
			})
		}
	}
}
