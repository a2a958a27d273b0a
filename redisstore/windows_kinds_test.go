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

// chargeLimiter is a window limiter of either store that charges beyond
// its limit.
type chargeLimiter interface {
	floodgate.Limiter
	floodgate.Charger
	floodgate.Refunder
}

// TestWindowChargesMatchMemory walks random decisions, refunds and
// charges beyond the limit (some huge, capped by the debt limits, some
// folding a log that holds its limit of entries) through the Redis window
// limiters and their in-memory twins on one fake timeline, and requires
// the same Decision at every step, and the same ErrDebtCapped: a debt
// carried into the coming windows means the same on both stores.
func TestWindowChargesMatchMemory(t *testing.T) {
	addr := redistest.Shared(t)
	rates := []floodgate.Rate{
		{Limit: 3, Period: time.Second},
		{Limit: 5, Period: time.Minute},
		{Limit: 12, Period: 1001 * time.Millisecond},
	}
	type pair struct {
		name string
		mem  func(floodgate.Rate, func() time.Time) (chargeLimiter, error)
		rl   func(redisstore.Scripter, floodgate.Rate, ...redisstore.Option) (chargeLimiter, error)
	}
	pairs := []pair{
		{"SlidingLog",
			func(r floodgate.Rate, now func() time.Time) (chargeLimiter, error) {
				return floodgate.NewSlidingLog(r, floodgate.WithClock(now))
			},
			func(s redisstore.Scripter, r floodgate.Rate, o ...redisstore.Option) (chargeLimiter, error) {
				return redisstore.NewSlidingLog(s, r, o...)
			}},
		{"SlidingLog/CountDenied",
			func(r floodgate.Rate, now func() time.Time) (chargeLimiter, error) {
				return floodgate.NewSlidingLog(r, floodgate.WithClock(now), floodgate.WithCountDenied())
			},
			func(s redisstore.Scripter, r floodgate.Rate, o ...redisstore.Option) (chargeLimiter, error) {
				return redisstore.NewSlidingLog(s, r, append(o, redisstore.WithCountDenied())...)
			}},
		{"SlidingCounter",
			func(r floodgate.Rate, now func() time.Time) (chargeLimiter, error) {
				return floodgate.NewSlidingCounter(r, floodgate.WithClock(now))
			},
			func(s redisstore.Scripter, r floodgate.Rate, o ...redisstore.Option) (chargeLimiter, error) {
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
					compareCharges(t, clock, mem, rl, r.Limit, r.Period)
				})
			}
		}
	}
}

func compareCharges(t *testing.T, clock *fakeClock, mem, rl chargeLimiter, limit int, period time.Duration) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, uint64(limit)))
	step := max(period/time.Duration(4*limit), time.Millisecond).Truncate(time.Millisecond)
	inDebt, ahead := 0, 0
	charged := map[string]bool{} // the key's last call was a charge above the limit
	for i := 0; i < 400; i++ {
		key := []string{"a", "b{x}"}[rng.IntN(2)]
		if rng.IntN(4) == 0 {
			n := rng.IntN(3*limit + 1)
			if rng.IntN(15) == 0 {
				n = 1 << 30
			}
			charged[key] = n > limit
			if err1, err2 := mem.ChargeN(ctx, key, n), rl.ChargeN(ctx, key, n); !sameCharge(err1, err2) {
				t.Fatalf("step %d: ChargeN(%d): in memory %v, on Redis %v", i, n, err1, err2)
			}
		} else if rng.IntN(8) == 0 {
			n := 1 + rng.IntN(limit)
			if err1, err2 := mem.RefundN(ctx, key, n), rl.RefundN(ctx, key, n); err1 != nil || err2 != nil {
				t.Fatalf("step %d: RefundN(%d): in memory %v, on Redis %v", i, n, err1, err2)
			}
		} else {
			n := rng.IntN(min(limit, 4) + 1)
			want, werr := mem.AllowN(ctx, key, n)
			want.RetryAfter, want.ResetAfter = roundUp(want.RetryAfter), roundUp(want.ResetAfter)
			got, gerr := rl.AllowN(ctx, key, n)
			if (werr == nil) != (gerr == nil) || got != want {
				t.Fatalf("step %d at +%v, AllowN(%q, %d):\n redis  %+v (%v)\n memory %+v (%v)", i, clock.t.Sub(t0), key, n, got, gerr, want, werr)
			}
			if !want.Allowed && charged[key] {
				inDebt++
			}
			if want.RetryAfter > period {
				ahead++ // a debt carried past the window
			}
			charged[key] = false
		}
		if rng.IntN(2) == 0 {
			clock.t = clock.t.Add(step * time.Duration(rng.IntN(8)))
		}
	}
	if inDebt == 0 || ahead == 0 {
		t.Errorf("%d decisions denied right after a charge above the limit, %d waiting past a window: the walk missed a case", inDebt, ahead)
	}
}

// A debt carried over several windows, settled by a decision that
// records nothing (a denial, a report), stays settled: the next decision,
// within the window the settling made real, counts what memory counts.
// Before the settling was saved by such a decision, the log's low mark
// was not, and the windows already gone counted again.
func TestWindowDebtSettledByADenial(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	r := floodgate.Rate{Limit: 3, Period: time.Second}
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			clock := &fakeClock{t0}
			mem, err := floodgate.NewSlidingLog(r, floodgate.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			rl, err := redisstore.NewSlidingLog(c.s, r, redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			if err1, err2 := mem.ChargeN(ctx, "k", 7), rl.ChargeN(ctx, "k", 7); err1 != nil || err2 != nil {
				t.Fatal(err1, err2) // 3 now, 3 carried into the next window, 1 into the one after
			}
			// At +2.5s the last window, of 1, is the current one: a denial
			// of 3 settles the debt; then 2 fit.
			for _, s := range []struct {
				at time.Duration
				n  int
			}{{2500 * time.Millisecond, 3}, {2700 * time.Millisecond, 0}, {2800 * time.Millisecond, 2}, {3200 * time.Millisecond, 1}} {
				clock.t = t0.Add(s.at)
				want, _ := mem.AllowN(ctx, "k", s.n)
				want.RetryAfter, want.ResetAfter = roundUp(want.RetryAfter), roundUp(want.ResetAfter)
				got, err := rl.AllowN(ctx, "k", s.n)
				if err != nil || got != want {
					t.Fatalf("at +%v, AllowN(%d): redis %+v (%v), memory %+v", s.at, s.n, got, err, want)
				}
			}
		})
	}
}
