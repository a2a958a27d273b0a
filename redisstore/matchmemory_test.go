package redisstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// fakeClock is a manual clock shared by a Redis limiter and its in-memory
// twin.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestTokenBucketMatchesMemory walks random traffic through a Redis bucket
// and floodgate.TokenBucket on one fake timeline and requires the same
// Decision at every step, for rates whose period does not divide by the
// limit and bursts other than the limit, greedy and with
// WithIntervalRefill on both.
func TestTokenBucketMatchesMemory(t *testing.T) {
	addr := redistest.Shared(t)
	cases := []struct {
		rate  floodgate.Rate
		burst int
	}{
		{floodgate.Rate{Limit: 3, Period: time.Second}, 3},
		{floodgate.Rate{Limit: 7, Period: 10 * time.Minute}, 7},
		{floodgate.Rate{Limit: 12, Period: 1001 * time.Millisecond}, 5},
		{floodgate.Rate{Limit: 10, Period: time.Second}, 25},
		{floodgate.Rate{Limit: 1000000, Period: time.Hour}, 1000},
	}
	for _, c := range clients(t, addr) {
		for _, interval := range []bool{false, true} {
			for _, tc := range cases {
				name := c.name + "/" + tc.rate.String()
				mopts := []floodgate.Option{floodgate.WithBurst(tc.burst)}
				ropts := []redisstore.Option{redisstore.WithBurst(tc.burst), patient}
				if interval {
					name += "/interval"
					mopts = append(mopts, floodgate.WithIntervalRefill())
					ropts = append(ropts, redisstore.WithIntervalRefill())
				}
				t.Run(name, func(t *testing.T) {
					clock := &fakeClock{t0}
					mem, err := floodgate.NewTokenBucket(tc.rate, append(mopts, floodgate.WithClock(clock.Now))...)
					if err != nil {
						t.Fatal(err)
					}
					rl, err := redisstore.NewTokenBucket(c.s, tc.rate, append(ropts, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)))...)
					if err != nil {
						t.Fatal(err)
					}
					compareSteps(t, clock, mem, rl, tc.burst, tc.rate.Period, 600)
				})
			}
		}
	}
}

// compare drives both limiters with the same random requests and refunds
// on two keys and fails on the first Decision that differs.
func compare(t *testing.T, clock *fakeClock, mem, rl floodgate.Limiter, capacity int, period time.Duration) {
	t.Helper()
	compareSteps(t, clock, mem, rl, capacity, period, 300)
}

// compareSteps is compare for a number of steps.
func compareSteps(t *testing.T, clock *fakeClock, mem, rl floodgate.Limiter, capacity int, period time.Duration, steps int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, uint64(capacity)))
	keys := []string{"a", "b{x}"}
	step := max(period/time.Duration(4*capacity), time.Millisecond).Truncate(time.Millisecond)
	for i := 0; i < steps; i++ {
		key := keys[rng.IntN(len(keys))]
		n := rng.IntN(min(capacity, 4) + 1)
		if rng.IntN(10) == 0 {
			n = capacity
		}
		want, werr := mem.AllowN(ctx, key, n)
		want.RetryAfter, want.ResetAfter = roundUp(want.RetryAfter), roundUp(want.ResetAfter)
		got, gerr := rl.AllowN(ctx, key, n)
		if (werr == nil) != (gerr == nil) || got != want {
			t.Fatalf("step %d at +%v, key %q, n=%d:\n redis  %+v (%v)\n memory %+v (%v)",
				i, clock.t.Sub(t0), key, n, got, gerr, want, werr)
		}
		// Now and then give an allowed request back, on both.
		if want.Allowed && n > 0 && rng.IntN(5) == 0 {
			mr, ok1 := mem.(floodgate.Refunder)
			rr, ok2 := rl.(floodgate.Refunder)
			if !ok1 || !ok2 {
				t.Fatalf("RefundN: in memory %v, on Redis %v", ok1, ok2)
			}
			if err1, err2 := mr.RefundN(ctx, key, n), rr.RefundN(ctx, key, n); err1 != nil || err2 != nil {
				t.Fatalf("step %d: RefundN: in memory %v, on Redis %v", i, err1, err2)
			}
		}
		if rng.IntN(3) == 0 {
			clock.t = clock.t.Add(step * time.Duration(rng.IntN(8)))
		}
		if !want.Allowed && rng.IntN(4) == 0 {
			clock.t = clock.t.Add(want.RetryAfter)
		}
	}
}

// roundUp rounds an in-memory duration up to the microsecond, the
// resolution of the Redis limiters.
func roundUp(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1).Truncate(time.Microsecond)
}

// TestWindowsMatchMemory does the same for the sliding log (with and
// without WithCountDenied) and the sliding counter against
// floodgate.SlidingLog and floodgate.SlidingCounter.
func TestWindowsMatchMemory(t *testing.T) {
	addr := redistest.Shared(t)
	rates := []floodgate.Rate{
		{Limit: 3, Period: time.Second},
		{Limit: 5, Period: time.Minute},
		{Limit: 12, Period: 1001 * time.Millisecond},
		{Limit: 100, Period: time.Hour},
	}
	type pair struct {
		name string
		mem  func(floodgate.Rate, func() time.Time) (floodgate.Limiter, error)
		rl   func(redisstore.Scripter, floodgate.Rate, ...redisstore.Option) (floodgate.Limiter, error)
	}
	pairs := []pair{
		{"SlidingLog",
			func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
				return floodgate.NewSlidingLog(r, floodgate.WithClock(now))
			},
			func(s redisstore.Scripter, r floodgate.Rate, o ...redisstore.Option) (floodgate.Limiter, error) {
				return redisstore.NewSlidingLog(s, r, o...)
			}},
		{"SlidingLog/CountDenied",
			func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
				return floodgate.NewSlidingLog(r, floodgate.WithClock(now), floodgate.WithCountDenied())
			},
			func(s redisstore.Scripter, r floodgate.Rate, o ...redisstore.Option) (floodgate.Limiter, error) {
				return redisstore.NewSlidingLog(s, r, append(o, redisstore.WithCountDenied())...)
			}},
		{"SlidingCounter",
			func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
				return floodgate.NewSlidingCounter(r, floodgate.WithClock(now))
			},
			func(s redisstore.Scripter, r floodgate.Rate, o ...redisstore.Option) (floodgate.Limiter, error) {
				return redisstore.NewSlidingCounter(s, r, o...)
			}},
	}
	for _, c := range clients(t, addr) {
		for _, p := range pairs {
			for _, r := range rates {
				t.Run(c.name+"/"+p.name+"/"+r.String(), func(t *testing.T) {
					clock := &fakeClock{t0}
					mem, err := p.mem(r, clock.Now)
					if err != nil {
						t.Fatal(err)
					}
					rl, err := p.rl(c.s, r, redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t)))
					if err != nil {
						t.Fatal(err)
					}
					compare(t, clock, mem, rl, r.Limit, r.Period)
				})
			}
		}
	}
}
