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
