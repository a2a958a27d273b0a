package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// The strategies are compared with the reference models step by step in
// the conformance suite (floodgatetest, check RateChange); the bounded
// store's debts across changes in evicted_test.go. These tests hold what
// is left: refusals, concurrency, and the change's atomicity.

// changeable is every in-memory limiter, as these tests use it.
type changeable interface {
	floodgate.Limiter
	floodgate.RateSetter
	Rate() floodgate.Rate
}

func changeableKinds(clock func() time.Time) map[string]func(floodgate.Rate) (changeable, error) {
	return map[string]func(floodgate.Rate) (changeable, error){
		"TokenBucket": func(r floodgate.Rate) (changeable, error) {
			return floodgate.NewTokenBucket(r, floodgate.WithClock(clock))
		},
		"TokenBucket/IntervalRefill": func(r floodgate.Rate) (changeable, error) {
			return floodgate.NewTokenBucket(r, floodgate.WithClock(clock), floodgate.WithIntervalRefill())
		},
		"SlidingLog": func(r floodgate.Rate) (changeable, error) {
			return floodgate.NewSlidingLog(r, floodgate.WithClock(clock))
		},
		"SlidingCounter": func(r floodgate.Rate) (changeable, error) {
			return floodgate.NewSlidingCounter(r, floodgate.WithClock(clock))
		},
	}
}

// TestSetRateRefusesAndKeeps: an impossible change is refused with the
// sentinel of the constructor's check, and changes nothing: the rate and
// every key's state stay as they were.
func TestSetRateRefusesAndKeeps(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_700_000_000, 0))
	ctx := context.Background()
	for name, build := range changeableKinds(clock.Now) {
		t.Run(name, func(t *testing.T) {
			lim, err := build(floodgate.PerMinute(5))
			mustNot(t, err)
			_, err = lim.AllowN(ctx, "k", 3)
			mustNot(t, err)
			bad := []struct {
				c    floodgate.RateChange
				want error
			}{
				{floodgate.RateChange{Rate: floodgate.Rate{Limit: 0, Period: time.Second}}, floodgate.ErrInvalidRate},
				{floodgate.RateChange{Rate: floodgate.Rate{Limit: 5, Period: -time.Second}}, floodgate.ErrInvalidRate},
				{floodgate.RateChange{Rate: floodgate.Rate{Limit: 1 << 25, Period: time.Second}}, floodgate.ErrInvalidRate},
				{floodgate.RateChange{Rate: floodgate.PerMinute(5), Inherit: floodgate.Inherit(9)}, floodgate.ErrInvalidOption},
				{floodgate.RateChange{Rate: floodgate.PerMinute(5), Burst: -1}, floodgate.ErrInvalidOption},
			}
			if name == "SlidingLog" {
				bad = append(bad, struct {
					c    floodgate.RateChange
					want error
				}{floodgate.RateChange{Rate: floodgate.Rate{Limit: floodgate.MaxSlidingLogLimit + 1, Period: time.Hour}}, floodgate.ErrInvalidRate})
			}
			if name == "SlidingLog" || name == "SlidingCounter" {
				bad = append(bad, struct {
					c    floodgate.RateChange
					want error
				}{floodgate.RateChange{Rate: floodgate.PerMinute(5), Burst: 9}, floodgate.ErrInvalidOption})
			}
			for _, b := range bad {
				if err := lim.SetRate(ctx, b.c); !errors.Is(err, b.want) {
					t.Errorf("SetRate(%+v) = %v, want %v", b.c, err, b.want)
				}
			}
			if r := lim.Rate(); r != floodgate.PerMinute(5) {
				t.Fatalf("rate after refused changes: %v", r)
			}
			d, err := lim.AllowN(ctx, "k", 0)
			mustNot(t, err)
			if d.Limit != 5 || d.Remaining != 2 {
				t.Fatalf("state after refused changes: %+v, want Limit 5, Remaining 2", d)
			}
		})
	}
}

// TestSetRateAtomic changes the rate while eight goroutines spend one
// hot key and many others at a frozen clock. Under KeepUsed a client
// that spent its quota before an upgrade gets exactly the difference
// after it, and after a downgrade nothing more: no decision falls
// between the two rates, whichever shard the walk has reached. Run it
// with -race.
func TestSetRateAtomic(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_700_000_000, 0))
	ctx := context.Background()
	for name, build := range changeableKinds(clock.Now) {
		for _, to := range []int{40, 10} {
			t.Run(fmt.Sprintf("%s/20_to_%d", name, to), func(t *testing.T) {
				lim, err := build(floodgate.PerHour(20))
				mustNot(t, err)
				var allowed, denied atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for g := range 8 {
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
								key = fmt.Sprintf("cold-%d-%d", g, i%512)
							}
							d, err := lim.AllowN(ctx, key, 1)
							if err != nil {
								t.Error(err)
								return
							}
							if key != "hot" {
								continue
							}
							if d.Allowed {
								allowed.Add(1)
							} else {
								denied.Add(1)
							}
						}
					}()
				}
				for denied.Load() == 0 {
					runtime.Gosched() // until the hot key is spent
				}
				mustNot(t, lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(to)}))
				for d := denied.Load(); denied.Load() < d+100; {
					runtime.Gosched()
				}
				close(stop)
				wg.Wait()
				if got, want := allowed.Load(), int64(max(20, to)); got != want {
					t.Fatalf("the hot key was allowed %d times across the change, want %d", got, want)
				}
				if d, _ := lim.AllowN(ctx, "hot", 0); d.Limit != to {
					t.Fatalf("after the change: %+v, want Limit %d", d, to)
				}
			})
		}
	}
}

// TestSetRateCostAboveNewCapacity: a cost the new capacity cannot hold is
// refused as any such cost is, with the key's real quota.
func TestSetRateCostAboveNewCapacity(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_700_000_000, 0))
	ctx := context.Background()
	for name, build := range changeableKinds(clock.Now) {
		t.Run(name, func(t *testing.T) {
			lim, err := build(floodgate.PerMinute(10))
			mustNot(t, err)
			mustNot(t, lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerMinute(4)}))
			d, err := lim.AllowN(ctx, "k", 5)
			if !errors.Is(err, floodgate.ErrCostExceedsLimit) || d.Allowed || d.Limit != 4 {
				t.Fatalf("AllowN(5) after a change to 4/min: %+v, %v", d, err)
			}
		})
	}
}

// TestSetRateDowngradeWhileLimited: under the default, a client limited
// when its quota is cut stays limited until what it spent has refilled
// under the new rate: a downgrade never frees anyone.
func TestSetRateDowngradeWhileLimited(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_700_000_000, 0))
	ctx := context.Background()
	lim, err := floodgate.NewTokenBucket(floodgate.PerMinute(60), floodgate.WithClock(clock.Now))
	mustNot(t, err)
	_, err = lim.AllowN(ctx, "k", 60)
	mustNot(t, err)
	mustNot(t, lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerMinute(6)}))
	// 60 tokens at 6 a minute: ten minutes until full; one token fits
	// when 55 are back, after 9m10s.
	d, err := lim.AllowN(ctx, "k", 1)
	mustNot(t, err)
	if d.Allowed || d.RetryAfter != 9*time.Minute+10*time.Second || d.ResetAfter != 10*time.Minute {
		t.Fatalf("after the downgrade: %+v", d)
	}
}
