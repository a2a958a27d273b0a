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
			for i := 0; i < 1000; i++ {
				if d := mustAllowed(t, l, "k", 1, false); d != first {
					t.Fatalf("cached denial %+v, want %+v", d, first)
				}
			}
			calls(3)
			deniedAt := clock.t
			clock.t = clock.t.Add(redisstore.DenyCacheMaxAge - time.Microsecond)
			if d := mustAllowed(t, l, "k", 1, false); d.RetryAfter != first.RetryAfter-redisstore.DenyCacheMaxAge+time.Microsecond {
				t.Fatalf("cached RetryAfter %v after %v, want %v less", d.RetryAfter, redisstore.DenyCacheMaxAge-time.Microsecond, first.RetryAfter)
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
// on its own prefix: every Allowed and RetryAfter must agree.
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
				if err1 != nil || err2 != nil || got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter {
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
// deny cache.
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
		all := after[""] - before[""] - 1 // less the INFO itself
		t.Logf("deny cache %v: %d denied requests cost %d EVALSHA, %d Redis commands (%.4f per request)",
			withCache, total, evalsha, all, float64(all)/float64(total))
		switch {
		case !withCache && evalsha != int64(total):
			t.Errorf("without the cache: %d EVALSHA for %d requests, want one each", evalsha, total)
		case withCache && evalsha > goroutines:
			// Only the requests that raced the first denial reach Redis.
			t.Errorf("with the cache: %d EVALSHA for %d requests, want at most %d", evalsha, total, goroutines)
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
