package redisstore_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// countingScripter counts the round trips a limiter makes for its
// clients' keys, all of which have a hash tag: not the reads of the rate
// record (one a refresh interval, see WithRateRefresh).
type countingScripter struct {
	redisstore.Scripter
	calls atomic.Int64
}

func (c *countingScripter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if strings.Contains(keys[0], "{") {
		c.calls.Add(1)
	}
	return c.Scripter.EvalSha(ctx, sha, keys, args)
}

// Eval is not counted: it only follows an EvalSha that found no script.
func (c *countingScripter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return c.Scripter.Eval(ctx, src, keys, args)
}

// TestDenyCacheAnswersLocally walks one flood on a fake timeline: the first
// denial costs a round trip, the rest are answered in process with the
// RetryAfter shrinking as time passes, for DenyCacheMaxAge; then Redis is
// asked again, and allows once RetryAfter has passed. A cost other than the cached one, and Reset, go to
// Redis.
func TestDenyCacheAnswersLocally(t *testing.T) {
	addr := redistest.Shared(t)
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			cs := &countingScripter{Scripter: rueidisClient(t, addr).s}
			clock := &fakeClock{t0}
			l := a.mustNew(t, cs, floodgate.PerMinute(2), redisstore.WithClock(clock.Now),
				redisstore.WithDenyCache(100), patient, redisstore.WithPrefix(prefix(t)))
			calls := func(want int64) {
				t.Helper()
				if got := cs.calls.Load(); got != want {
					t.Fatalf("%d round trips, want %d", got, want)
				}
			}
			mustAllowed(t, l, "k", 1, true)
			mustAllowed(t, l, "k", 1, true)
			first := mustAllowed(t, l, "k", 1, false)
			calls(3)
			// A cached answer's wait is the entry's age left: the cache
			// cannot know what other instances did meanwhile.
			want := first
			want.RetryAfter = redisstore.DenyCacheMaxAge
			for i := 0; i < 1000; i++ {
				if d := mustAllowed(t, l, "k", 1, false); d != want {
					t.Fatalf("cached denial %+v, want %+v", d, want)
				}
			}
			calls(3)
			deniedAt := clock.t
			clock.t = clock.t.Add(redisstore.DenyCacheMaxAge - time.Microsecond)
			if d := mustAllowed(t, l, "k", 1, false); d.RetryAfter != time.Microsecond {
				t.Fatalf("cached RetryAfter %v after %v, want 1µs: what is left of the entry's age", d.RetryAfter, redisstore.DenyCacheMaxAge-time.Microsecond)
			}
			calls(3)
			clock.t = clock.t.Add(time.Microsecond) // the entry is DenyCacheMaxAge old: Redis again
			mustAllowed(t, l, "k", 1, false)
			calls(4)
			mustAllowed(t, l, "k", 2, false) // another cost: asks Redis
			calls(5)
			clock.t = deniedAt.Add(first.RetryAfter)
			mustAllowed(t, l, "k", 1, true)
			calls(6)

			// Drain whatever else came back, then Reset a cached denial.
			for {
				if d, _ := l.AllowN(context.Background(), "k", 1); !d.Allowed {
					break
				}
			}
			drained := cs.calls.Load()
			mustAllowed(t, l, "k", 1, false)
			calls(drained)
			if err := l.Reset(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			mustAllowed(t, l, "k", 1, true) // Reset cleared the entry
			calls(drained + 2)              // the reset script and the decision
		})
	}
}

// TestDenyCacheIsExact runs the same random traffic, on two keys and one
// fake timeline, through a limiter with a deny cache and one without, each
// on its own prefix: every Allowed must agree, and every RetryAfter but
// a cached one held to its entry's age left.
func TestDenyCacheIsExact(t *testing.T) {
	addr := redistest.Shared(t)
	s := goRedis(t, addr).s
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			clock := &fakeClock{t0}
			rate := floodgate.Rate{Limit: 5, Period: 10 * time.Second}
			plain := a.mustNew(t, s, rate, redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t)))
			cached := a.mustNew(t, s, rate, redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t)),
				redisstore.WithDenyCache(10))
			rng := rand.New(rand.NewPCG(7, 7))
			ctx := context.Background()
			for i := 0; i < 400; i++ {
				key := []string{"a", "b"}[rng.IntN(2)]
				n := 1 + rng.IntN(2)
				want, err1 := plain.AllowN(ctx, key, n)
				got, err2 := cached.AllowN(ctx, key, n)
				// A cached answer's wait is Redis's, or the entry's age
				// left when that is shorter (see TestDenyCacheRetryAfterBounded).
				capped := got.RetryAfter < want.RetryAfter && got.RetryAfter <= redisstore.DenyCacheMaxAge
				if err1 != nil || err2 != nil || got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter && !capped {
					t.Fatalf("step %d, %q n=%d: cached %+v (%v), plain %+v (%v)", i, key, n, got, err2, want, err1)
				}
				clock.t = clock.t.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
			}
		})
	}
}

// TestDenyCacheCommandsPerDenial measures, on the server's clock, the Redis
// commands a flood of denied requests costs (INFO commandstats before and
// after: EVALSHA plus the commands the script runs), with and without the
// deny cache. Concurrent decisions share batch scripts, so the decisions
// the server made are counted by the GET of the state each one runs.
func TestDenyCacheCommandsPerDenial(t *testing.T) {
	addr := redistest.Shared(t)
	const (
		goroutines = 16
		per        = 125 // 2000 denied requests
	)
	for _, withCache := range []bool{false, true} {
		c := rueidisClient(t, addr)
		opts := []redisstore.Option{patient, redisstore.WithPrefix(prefix(t))}
		if withCache {
			opts = append(opts, redisstore.WithDenyCache(1000))
		}
		l, err := redisstore.NewTokenBucket(c.s, floodgate.PerHour(1), opts...)
		if err != nil {
			t.Fatal(err)
		}
		mustAllowed(t, l, "flood", 1, true)
		before := commandCalls(t, addr)
		var wg sync.WaitGroup
		var allowed atomic.Int64
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					if d, err := l.Allow(context.Background(), "flood"); err != nil || d.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		after := commandCalls(t, addr)
		if allowed.Load() != 0 {
			t.Fatalf("%d requests of the flood allowed or failed, want all denied", allowed.Load())
		}
		total := goroutines * per
		evalsha := after["evalsha"] - before["evalsha"]
		decided := after["get"] - before["get"]
		all := after[""] - before[""] - 1 // less the INFO itself
		t.Logf("deny cache %v: %d denied requests cost %d decisions in %d EVALSHA, %d Redis commands (%.4f per request)",
			withCache, total, decided, evalsha, all, float64(all)/float64(total))
		switch {
		case !withCache && decided != int64(total):
			t.Errorf("without the cache: %d decisions in Redis for %d requests, want one each", decided, total)
		case withCache && decided > goroutines:
			// Only the requests that raced the first denial reach Redis.
			t.Errorf("with the cache: %d decisions in Redis for %d requests, want at most %d", decided, total, goroutines)
		}
	}
}

// commandCalls returns INFO commandstats' call counts by command, and
// their sum under "".
func commandCalls(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	info, err := redistest.Info(addr, "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		out[name] += n
		out[""] += n
	}
	return out
}

// TestDenyCacheStalenessIsBounded (issue 18, item 8): two instances of a
// limiter on one server, A with a deny cache. A caches a denial whose
// RetryAfter is 30 minutes; then B resets the key, or refunds a unit. A
// may answer from its stale entry for at most DenyCacheMaxAge after that:
// one DenyCacheMaxAge later, A asks Redis and allows. Before, A kept
// denying until the cached RetryAfter had passed, 30 minutes here (15
// measured from outside).
func TestDenyCacheStalenessIsBounded(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	for _, c := range []func(testing.TB, string) client{goRedis, rueidisClient} {
		ca, cb := c(t, addr), c(t, addr) // two processes' clients
		for _, a := range algos {
			for _, undo := range []string{"Reset", "RefundN"} {
				t.Run(ca.name+"/"+a.name+"/"+undo, func(t *testing.T) {
					clock := &fakeClock{t0}
					p := prefix(t)
					opts := []redisstore.Option{redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(p)}
					instA := a.mustNew(t, ca.s, floodgate.PerHour(2), append(opts, redisstore.WithDenyCache(100))...)
					instB := a.mustNew(t, cb.s, floodgate.PerHour(2), opts...)
					mustAllowed(t, instA, "k", 2, true)
					d := mustAllowed(t, instA, "k", 1, false) // cached now
					if d.RetryAfter < 29*time.Minute {
						t.Fatalf("denial %+v, want a RetryAfter of about 30 minutes", d)
					}
					switch undo {
					case "Reset":
						if err := instB.Reset(ctx, "k"); err != nil {
							t.Fatal(err)
						}
					case "RefundN":
						if err := instB.(floodgate.Refunder).RefundN(ctx, "k", 1); err != nil {
							t.Fatal(err)
						}
					}
					clock.t = clock.t.Add(redisstore.DenyCacheMaxAge - time.Microsecond)
					mustAllowed(t, instA, "k", 1, false) // stale, within the bound
					clock.t = clock.t.Add(time.Microsecond)
					mustAllowed(t, instA, "k", 1, true)
				})
			}
		}
	}
}

// TestDenyCacheFollowsRaise (issue 29, finding 6): two instances on one
// server, A with a deny cache. A caches a denial; B raises the limit. Once
// B's SetRate has returned, A allows the key at once, on a frozen clock
// where the entry would otherwise answer for ever: a cached denial
// answers only under the rate version it was given under, read within
// the refresh interval. Before, A kept denying for up to
// DenyCacheMaxAge (on this frozen clock, for good).
func TestDenyCacheFollowsRaise(t *testing.T) {
	addr := redistest.Shared(t)
	for _, c := range []func(testing.TB, string) client{goRedis, rueidisClient} {
		for _, alg := range changingAlgos {
			t.Run(c(t, addr).name+"/"+alg.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(20 * time.Millisecond), patient}
				a, err := alg.new(c(t, addr).s, floodgate.PerHour(2), append(opts, redisstore.WithDenyCache(100))...)
				mustNot(t, err)
				b, err := alg.new(c(t, addr).s, floodgate.PerHour(2), opts...)
				mustNot(t, err)
				mustAllowed(t, a, "k", 2, true)
				mustAllowed(t, a, "k", 1, false)
				mustAllowed(t, a, "k", 1, false) // from the cache
				mustNot(t, b.SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(4)}))
				if d := mustAllowed(t, a, "k", 1, true); d.Limit != 4 || d.Remaining != 1 {
					t.Fatalf("A after B's raise returned: %+v, want Limit 4, Remaining 1", d)
				}
			})
		}
	}
}

// TestDenyCacheDenialInFlightAcrossChange: A's denial is on its way back
// while A reads a raise (another decision of A adopts it): the denial,
// given under the old rate, is cached after the change emptied the
// cache, and must not answer under the new rate. Before, it did, for up
// to DenyCacheMaxAge (on this frozen clock, for good).
func TestDenyCacheDenialInFlightAcrossChange(t *testing.T) {
	addr := redistest.Shared(t)
	for _, cl := range clients(t, addr) {
		for _, alg := range changingAlgos {
			t.Run(cl.name+"/"+alg.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(5 * time.Millisecond), patient}
				b, err := alg.new(goRedis(t, addr).s, floodgate.PerHour(2), opts...)
				mustNot(t, err)
				var armed, fired atomic.Bool
				var a changing
				hook := func(r []int64) {
					if len(r) < 4 || r[0] != 0 || !armed.CompareAndSwap(true, false) {
						return
					}
					mustNot(t, b.SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(4)}))
					mustAllowed(t, a, "other", 0, true) // A reads the raise
					fired.Store(true)
				}
				a, err = alg.new(hookScripter{cl.s, hook}, floodgate.PerHour(2), append(opts, redisstore.WithDenyCache(100))...)
				mustNot(t, err)
				mustAllowed(t, a, "k", 2, true)
				armed.Store(true)
				if d := mustAllowed(t, a, "k", 1, false); d.Limit != 2 {
					t.Fatalf("the denial in flight: %+v, want one of the old rate", d)
				}
				if !fired.Load() {
					t.Fatal("no denial was stepped into: the test did not test")
				}
				if d := mustAllowed(t, a, "k", 1, true); d.Limit != 4 || d.Remaining != 1 {
					t.Fatalf("A under the raise it read: %+v, want Limit 4, Remaining 1", d)
				}
			})
		}
	}
}

// TestDenyCacheRetryAfterBounded (issue 29, finding 6): a cached denial
// never promises a wait longer than the cache can know. A caches a
// denial whose true wait is 30 minutes; B refunds the unit. A's cached
// answers say at most what is left of DenyCacheMaxAge, and a client that
// waits that long is let in by Redis. Before, the cached answer said 30
// minutes (15 measured from outside) although the unit was back and the
// cache let the client in a second later.
func TestDenyCacheRetryAfterBounded(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	for _, c := range []func(testing.TB, string) client{goRedis, rueidisClient} {
		for _, alg := range algos {
			t.Run(c(t, addr).name+"/"+alg.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t))}
				a := alg.mustNew(t, c(t, addr).s, floodgate.PerHour(2), append(opts, redisstore.WithDenyCache(100))...)
				b := alg.mustNew(t, c(t, addr).s, floodgate.PerHour(2), opts...)
				mustAllowed(t, a, "k", 2, true)
				if d := mustAllowed(t, a, "k", 1, false); d.RetryAfter < 29*time.Minute {
					t.Fatalf("Redis's denial %+v, want its true wait of about 30 minutes", d)
				}
				if err := b.(floodgate.Refunder).RefundN(ctx, "k", 1); err != nil {
					t.Fatal(err)
				}
				d := mustAllowed(t, a, "k", 1, false) // A's cache cannot know
				if d.RetryAfter <= 0 || d.RetryAfter > redisstore.DenyCacheMaxAge {
					t.Fatalf("cached denial %+v: RetryAfter must be within DenyCacheMaxAge %v", d, redisstore.DenyCacheMaxAge)
				}
				clock.t = clock.t.Add(300 * time.Millisecond)
				if d2 := mustAllowed(t, a, "k", 1, false); d2.RetryAfter != d.RetryAfter-300*time.Millisecond {
					t.Fatalf("cached denial 300 ms later: %+v, want RetryAfter %v", d2, d.RetryAfter-300*time.Millisecond)
				}
				clock.t = clock.t.Add(d.RetryAfter - 300*time.Millisecond) // the client obeys the header
				mustAllowed(t, a, "k", 1, true)
			})
		}
	}
}

// stepScripter runs before ahead of every call of the Scripter it wraps
// and after on every reply, each with the call's keys, when set: a test
// steps in between a round trip's send and its reply.
type stepScripter struct {
	redisstore.Scripter
	before func(keys []string)
	after  func(keys []string, r []int64)
}

func (s stepScripter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return s.step(keys, func() ([]int64, error) { return s.Scripter.EvalSha(ctx, sha, keys, args) })
}

func (s stepScripter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return s.step(keys, func() ([]int64, error) { return s.Scripter.Eval(ctx, src, keys, args) })
}

func (s stepScripter) step(keys []string, call func() ([]int64, error)) ([]int64, error) {
	if s.before != nil {
		s.before(keys)
	}
	r, err := call()
	if err == nil && s.after != nil {
		s.after(keys, r)
	}
	return r, err
}

// clientKey reports whether keys are a client's (they carry its hash
// tag), not the rate record's.
func clientKey(keys []string) bool { return len(keys) > 0 && strings.Contains(keys[0], "{") }

// leftAfter is a key's Remaining, at 2 an hour, after 2 taken, the undo,
// and 1 more taken.
var leftAfter = map[string]int{"Reset": 1, "RefundN": 0}

// undoOwn runs the instance's own Reset of key, or its refund of one
// unit.
func undoOwn(t *testing.T, l limiter, undo, key string) {
	t.Helper()
	var err error
	if undo == "Reset" {
		err = l.Reset(context.Background(), key)
	} else {
		err = l.(floodgate.Refunder).RefundN(context.Background(), key, 1)
	}
	if err != nil {
		t.Fatalf("%s(%q): %v", undo, key, err)
	}
}

// TestDenyCacheOwnUndoRacingDenial (issue 29 item 6, the checker's
// ownRefund finding): an instance's own Reset or refund clears its cached
// denial of the key at once, also of a denial whose round trip raced it.
// A's denial of k comes back from Redis, and before A caches it, A's own
// Reset or RefundN of k runs and returns (the reply hook): the denial,
// made before the undo, must not be cached after it. Before the fix, the
// undo dropped the entry first and the racing denial stored it after, so
// the next decision was denied from the cache for up to DenyCacheMaxAge
// (on this frozen clock, for good) though Redis had room.
func TestDenyCacheOwnUndoRacingDenial(t *testing.T) {
	addr := redistest.Shared(t)
	for _, cl := range clients(t, addr) {
		for _, alg := range algos {
			for _, undo := range []string{"Reset", "RefundN"} {
				t.Run(cl.name+"/"+alg.name+"/"+undo, func(t *testing.T) {
					clock := &fakeClock{t0}
					var armed, fired atomic.Bool
					var a limiter
					hook := func(keys []string, r []int64) {
						// A decision's denial (see TestDenyCacheDenialInFlightAcrossChange).
						if !clientKey(keys) || len(r) < 4 || r[0] != 0 || !armed.CompareAndSwap(true, false) {
							return
						}
						undoOwn(t, a, undo, "k")
						fired.Store(true)
					}
					a = alg.mustNew(t, stepScripter{Scripter: cl.s, after: hook}, floodgate.PerHour(2), redisstore.WithClock(clock.Now),
						patient, redisstore.WithPrefix(prefix(t)), redisstore.WithDenyCache(100))
					mustAllowed(t, a, "k", 2, true)
					armed.Store(true)
					mustAllowed(t, a, "k", 1, false) // Redis's denial, made before the undo
					if !fired.Load() {
						t.Fatal("no denial was stepped into: the test did not test")
					}
					if d := mustAllowed(t, a, "k", 1, true); d.Remaining != leftAfter[undo] {
						t.Fatalf("after A's own %s: %+v, want Remaining %d", undo, d, leftAfter[undo])
					}
				})
			}
		}
	}
}

// TestDenyCacheOwnUndoInFlight: the other order. While A's own Reset or
// refund of k is on its way (the send hook, before its script is sent),
// a decision of A is denied by Redis, which has not run the undo yet, and
// cached; then the undo runs and returns. The next decision must go to
// Redis and be allowed. Before the fix, the undo dropped the entry before
// its round trip only, so the denial made during it stayed cached.
func TestDenyCacheOwnUndoInFlight(t *testing.T) {
	addr := redistest.Shared(t)
	for _, cl := range clients(t, addr) {
		for _, alg := range algos {
			for _, undo := range []string{"Reset", "RefundN"} {
				t.Run(cl.name+"/"+alg.name+"/"+undo, func(t *testing.T) {
					clock := &fakeClock{t0}
					var armed, fired atomic.Bool
					var a limiter
					hook := func(keys []string) {
						// The undo's script, on the client's keys: not a
						// read of the rate record.
						if !clientKey(keys) || !armed.CompareAndSwap(true, false) {
							return
						}
						mustAllowed(t, a, "k", 1, false) // Redis has not run the undo yet
						fired.Store(true)
					}
					a = alg.mustNew(t, stepScripter{Scripter: cl.s, before: hook}, floodgate.PerHour(2), redisstore.WithClock(clock.Now),
						patient, redisstore.WithPrefix(prefix(t)), redisstore.WithDenyCache(100))
					mustAllowed(t, a, "k", 2, true)
					armed.Store(true)
					undoOwn(t, a, undo, "k")
					if !fired.Load() {
						t.Fatal("no denial was made during the undo: the test did not test")
					}
					if d := mustAllowed(t, a, "k", 1, true); d.Remaining != leftAfter[undo] {
						t.Fatalf("after A's own %s returned: %+v, want Remaining %d", undo, d, leftAfter[undo])
					}
				})
			}
		}
	}
}
