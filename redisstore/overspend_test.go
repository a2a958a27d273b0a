package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// redisCharger is a Redis limiter that charges beyond its quota.
type redisCharger interface {
	floodgate.Limiter
	floodgate.Charger
}

// redisKinds builds each Redis limiter that charges, on s at r.
func redisKinds(s redisstore.Scripter, r floodgate.Rate) map[string]func(...redisstore.Option) (redisCharger, error) {
	return map[string]func(...redisstore.Option) (redisCharger, error){
		"TokenBucket":    func(o ...redisstore.Option) (redisCharger, error) { return redisstore.NewTokenBucket(s, r, o...) },
		"SlidingLog":     func(o ...redisstore.Option) (redisCharger, error) { return redisstore.NewSlidingLog(s, r, o...) },
		"SlidingCounter": func(o ...redisstore.Option) (redisCharger, error) { return redisstore.NewSlidingCounter(s, r, o...) },
	}
}

// The client whose calls cost 5 times their estimate, 20 at once on 10 a
// minute, on Redis as in memory (floodgate's TestOverSpendIsBoundedOverAnyRun):
// over 30 minutes every algorithm admits the limit a period plus what the
// calls in flight over-spent once, and the first denial after it waits
// the same order of time everywhere.
func TestOverSpendIsBoundedOverAnyRun(t *testing.T) {
	addr := redistest.Shared(t)
	o := conformance.OverSpend{Limit: 10, Calls: 20, Cost: 5, Period: time.Minute, Periods: 30}
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			waits := map[string]time.Duration{}
			for name, build := range redisKinds(c.s, floodgate.Rate{Limit: o.Limit, Period: o.Period}) {
				t.Run(name, func(t *testing.T) {
					clock := &fakeClock{t0}
					l, err := build(redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)), patient)
					if err != nil {
						t.Fatal(err)
					}
					res := o.Run(t, l, func(d time.Duration) { clock.t = clock.t.Add(d) })
					if avg := res.PerPeriod(o); avg > float64(o.Limit)*1.3 {
						t.Errorf("%.1f a minute on a limit of %d", avg, o.Limit)
					}
					waits[name] = res.FirstWait
				})
			}
			conformance.SameMagnitude(t, waits)
		})
	}
}

// One reported cost of 2^24 on 10 a second costs the hour the default
// debt limits allow per call on Redis too, and says it was capped; thirty
// of them the day they allow in all.
func TestHugeCostIsBounded(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		for name, build := range redisKinds(c.s, floodgate.Rate{Limit: 10, Period: time.Second}) {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				clock := &fakeClock{t0}
				l, err := build(redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)), patient)
				if err != nil {
					t.Fatal(err)
				}
				wait := func(want time.Duration) {
					t.Helper()
					d, err := l.AllowN(ctx, "k", 1)
					if err != nil || d.Allowed || d.RetryAfter < want-2*time.Second || d.RetryAfter > want+2*time.Second {
						t.Fatalf("%+v %v, want denied about %v", d, err, want)
					}
				}
				if err := l.ChargeN(ctx, "k", 1<<24); !errors.Is(err, floodgate.ErrDebtCapped) {
					t.Fatalf("a huge cost: %v, want ErrDebtCapped", err)
				}
				wait(time.Hour)
				for range 30 {
					if err := l.ChargeN(ctx, "k", 1<<24); !errors.Is(err, floodgate.ErrDebtCapped) {
						t.Fatalf("a huge cost: %v, want ErrDebtCapped", err)
					}
				}
				wait(24 * time.Hour)
			})
		}
	}
}

// WithMaxDebt refuses, as in memory, limits no limiter can hold, a limit
// that charges nothing (an in-flight limit, leased quota), and a repeat.
func TestWithMaxDebtRefusals(t *testing.T) {
	r := floodgate.PerMinute(10)
	for _, l := range []floodgate.DebtLimits{
		{}, {PerCall: time.Hour}, {PerCall: -1, Total: time.Hour},
		{PerCall: 2 * time.Hour, Total: time.Hour},
		{PerCall: time.Hour, Total: floodgate.MaxDebtLimit + 1},
	} {
		if _, err := redisstore.NewTokenBucket(noServer{}, r, redisstore.WithMaxDebt(l)); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%+v: %v, want ErrInvalidOption", l, err)
		}
	}
	ok := redisstore.WithMaxDebt(floodgate.DefaultDebtLimits)
	if _, err := redisstore.NewInFlight(noServer{}, 3, ok); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("an in-flight limit: %v, want ErrInvalidOption", err)
	}
	if _, err := redisstore.NewSlidingCounter(noServer{}, r, ok, redisstore.WithLease(redisstore.Lease{})); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("leased quota: %v, want ErrInvalidOption", err)
	}
	if _, err := redisstore.NewSlidingLog(noServer{}, r, ok, ok); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("given twice: %v, want ErrInvalidOption", err)
	}
	for _, o := range []redisstore.Option{ok, redisstore.WithMaxDebt(floodgate.DebtLimits{PerCall: time.Minute, Total: time.Hour})} {
		if _, err := redisstore.NewSlidingLog(noServer{}, r, o); err != nil {
			t.Errorf("valid limits refused: %v", err)
		}
	}
}
