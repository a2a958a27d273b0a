package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestTokenBucketKindsMatchMemory walks random traffic of every kind —
// decisions, bookings ahead (ReserveN), charges beyond the quota
// (ChargeN, some of them huge), refunds — through a Redis bucket and
// floodgate.TokenBucket on one fake timeline, greedy and intervally
// refilled, and requires the same Decision and wait at every step: the
// admission kinds mean the same on both stores.
func TestTokenBucketKindsMatchMemory(t *testing.T) {
	addr := redistest.Shared(t)
	cases := []struct {
		rate  floodgate.Rate
		burst int
	}{
		{floodgate.Rate{Limit: 3, Period: time.Second}, 3},
		{floodgate.Rate{Limit: 12, Period: 1001 * time.Millisecond}, 5},
		{floodgate.Rate{Limit: 10, Period: time.Second}, 25},
		{floodgate.Rate{Limit: 7, Period: 10 * time.Minute}, 7},
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
					compareKinds(t, clock, mem, rl, tc.burst, tc.rate.Period, 400)
				})
			}
		}
	}
}

// kinds is a token bucket of either store with the optional interfaces of
// the admission kinds.
type kinds interface {
	floodgate.Limiter
	floodgate.Reserver
	floodgate.Charger
}

func compareKinds(t *testing.T, clock *fakeClock, mem, rl kinds, capacity int, period time.Duration, steps int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(2, uint64(capacity)))
	step := max(period/time.Duration(4*capacity), time.Millisecond).Truncate(time.Millisecond)
	booked, inDebt := 0, 0
	defer func() {
		if !t.Failed() && (booked == 0 || inDebt == 0) {
			t.Errorf("%d bookings ahead and %d decisions in debt: the walk missed a kind", booked, inDebt)
		}
	}()
	for i := 0; i < steps; i++ {
		key := []string{"a", "b{x}"}[rng.IntN(2)]
		n := rng.IntN(min(capacity, 4) + 1)
		switch op := rng.IntN(10); {
		case op < 4:
			want, werr := mem.AllowN(ctx, key, n)
			got, gerr := rl.AllowN(ctx, key, n)
			want.RetryAfter, want.ResetAfter = roundUp(want.RetryAfter), roundUp(want.ResetAfter)
			if (werr == nil) != (gerr == nil) || got != want {
				t.Fatalf("step %d at +%v, AllowN(%q, %d):\n redis  %+v (%v)\n memory %+v (%v)", i, clock.t.Sub(t0), key, n, got, gerr, want, werr)
			}
			if want.ResetAfter > period*time.Duration(capacity+1) {
				inDebt++
			}
		case op < 8:
			maxWait := step * time.Duration(rng.IntN(4*capacity))
			want, werr := mem.ReserveN(ctx, key, n, maxWait)
			got, gerr := rl.ReserveN(ctx, key, n, maxWait)
			want.RetryAfter, want.ResetAfter, want.Wait = roundUp(want.RetryAfter), roundUp(want.ResetAfter), roundUp(want.Wait)
			if (werr == nil) != (gerr == nil) || got != want {
				t.Fatalf("step %d at +%v, ReserveN(%q, %d, %v):\n redis  %+v (%v)\n memory %+v (%v)", i, clock.t.Sub(t0), key, n, maxWait, got, gerr, want, werr)
			}
			if want.Wait > 0 {
				booked++
			}
			if want.Allowed && want.Wait > 0 && rng.IntN(3) == 0 { // the waiter hangs up
				if err1, err2 := mem.RefundN(ctx, key, n), rl.RefundN(ctx, key, n); err1 != nil || err2 != nil {
					t.Fatalf("step %d: RefundN: %v, %v", i, err1, err2)
				}
			}
		default:
			n = rng.IntN(3 * capacity)
			if rng.IntN(20) == 0 {
				n = 1 << 30 // saturates
			}
			if err1, err2 := mem.ChargeN(ctx, key, n), rl.ChargeN(ctx, key, n); !sameCharge(err1, err2) {
				t.Fatalf("step %d: ChargeN: %v, %v", i, err1, err2)
			}
			if n == 1<<30 { // start afresh: a saturated debt outlasts the test
				_ = mem.(floodgate.Resetter).Reset(ctx, key)
				_ = rl.(floodgate.Resetter).Reset(ctx, key)
			}
		}
		if rng.IntN(3) == 0 {
			clock.t = clock.t.Add(step * time.Duration(rng.IntN(8)))
		}
	}
}

// sameCharge reports whether two charges' errors say the same: none, or
// both that the debt limit capped it (floodgate.ErrDebtCapped).
func sameCharge(err1, err2 error) bool {
	return err1 == nil && err2 == nil || errors.Is(err1, floodgate.ErrDebtCapped) && errors.Is(err2, floodgate.ErrDebtCapped)
}

// A saturated debt on Redis stays a long, finite wait: the largest charges
// again and again, on the slowest rate, never wrap, and each says it was
// capped.
func TestTokenBucketChargeSaturates(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		for _, interval := range []bool{false, true} {
			clock := &fakeClock{t0} // still: a saturated wait never shrinks
			opts := []redisstore.Option{patient, redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now),
				redisstore.WithMaxDebt(floodgate.DebtLimits{PerCall: floodgate.MaxDebtLimit, Total: floodgate.MaxDebtLimit})}
			if interval {
				opts = append(opts, redisstore.WithIntervalRefill())
			}
			rl, err := redisstore.NewTokenBucket(c.s, floodgate.Rate{Limit: 1, Period: 30 * 365 * 24 * time.Hour}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var last time.Duration
			for i := 0; i < 50; i++ {
				if err := rl.ChargeN(ctx, "k", 1<<30); !errors.Is(err, floodgate.ErrDebtCapped) {
					t.Fatalf("charge %d: %v, want ErrDebtCapped", i, err)
				}
				d, err := rl.AllowN(ctx, "k", 1)
				if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter < last || d.RetryAfter <= 0 {
					t.Fatalf("%s interval %v, charge %d: %+v, %v (last %v)", c.name, interval, i, d, err, last)
				}
				last = d.RetryAfter
			}
			if last < 60*365*24*time.Hour {
				t.Errorf("%s interval %v: saturated wait %v, want about 65 years (a period of 30 and the widest debt, 35)", c.name, interval, last)
			}
			if err := rl.ChargeN(ctx, "k", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
				t.Errorf("negative charge: %v", err)
			}
		}
	}
}

// Leased quota hands out units Redis charged ahead, which neither a debt
// nor a booking can be squared with: a leasing limiter is refused by
// WithCostAfter and WithWait at construction, and its ChargeN and
// ReserveN say why.
func TestLeasedQuotaRefusesTheKinds(t *testing.T) {
	addr := redistest.Shared(t)
	c := clients(t, addr)[0]
	ctx := context.Background()
	tb, err := redisstore.NewTokenBucket(c.s, floodgate.PerSecond(100), redisstore.WithLease(redisstore.Lease{}), redisstore.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := redisstore.NewSlidingCounter(c.s, floodgate.PerSecond(100), redisstore.WithLease(redisstore.Lease{}), redisstore.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]floodgate.Limiter{"token bucket": tb, "sliding counter": sc} {
		if _, err := floodgate.NewMiddleware(l, floodgate.WithCostAfter(floodgate.CostReported)); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: WithCostAfter: %v, want ErrInvalidOption", name, err)
		}
		if err := l.(floodgate.Charger).ChargeN(ctx, "k", 1); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: ChargeN: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := floodgate.NewMiddleware(tb, floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, PerKey: 1, Total: 1})); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("WithWait: %v, want ErrInvalidOption", err)
	}
	if _, err := tb.ReserveN(ctx, "k", 1, time.Second); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("ReserveN: %v, want ErrInvalidOption", err)
	}
	if _, err := redisstore.NewInFlight(c.s, 3, redisstore.WithLease(redisstore.Lease{})); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("an in-flight limit with leased quota: %v, want ErrInvalidOption", err)
	}
}
