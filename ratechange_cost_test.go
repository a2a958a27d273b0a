package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A cost is judged by the rate the decision decides under, while SetRate
// converts the shards one at a time (the checker's finding on
// RateChangesAnyCost, issue 28): a key already converted is never refused
// by the capacity its rate replaced, one not converted yet never allowed
// by the new one, and a cost that never fits is refused the same way by
// AllowN and ReserveN — ErrCostExceedsLimit, the Limit of the key's rate,
// no RetryAfter. A window's RefundN takes back what the key may have
// been charged, under its rate or the published one: a key already
// raised is not refused the new capacity.
//
// The injected clock is the interleaving: SetRate reads it once before
// each shard it converts, and the clock probes every key there, on
// SetRate's goroutine, with nothing else running.
func TestRateChangeJudgesCostByTheKeysRate(t *testing.T) {
	kinds := []struct {
		name     string
		reserves bool
		build    func(floodgate.Rate, ...floodgate.Option) (floodgate.Limiter, error)
	}{
		{"TokenBucket", true, func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, o...)
		}},
		{"TokenBucket/IntervalRefill", true, func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, append(o, floodgate.WithIntervalRefill())...)
		}},
		{"SlidingLog", false, func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewSlidingLog(r, o...)
		}},
		{"SlidingCounter", false, func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewSlidingCounter(r, o...)
		}},
	}
	changes := []struct {
		name     string
		from, to int
	}{{"raise", 5, 10}, {"lower", 10, 5}}
	const keys = 32
	for _, k := range kinds {
		for _, c := range changes {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				now := time.Unix(1_000_000, 0)
				var probe func()
				l, err := k.build(floodgate.Rate{Limit: c.from, Period: time.Minute}, floodgate.WithShards(4),
					floodgate.WithClock(func() time.Time {
						if p := probe; p != nil {
							probe = nil // the probe's own calls read the clock too
							p()
							probe = p
						}
						return now
					}))
				if err != nil {
					t.Fatal(err)
				}
				for i := range keys { // every key tracked, with 1 unit used
					if d, err := l.AllowN(ctx, fmt.Sprint("k", i), 1); err != nil || !d.Allowed {
						t.Fatalf("k%d: %+v, %v", i, d, err)
					}
				}
				n := max(c.from, c.to) // fits one rate, not the other
				seen := map[int]int{}  // the keys seen under each Limit, at some probe
				probes := 0
				probe = func() {
					probes++
					limits := map[int]int{}
					for i := range keys {
						key := fmt.Sprint("k", i)
						r, err := l.AllowN(ctx, key, 0)
						if err != nil || !r.Allowed {
							t.Fatalf("probe %d, %s: report %+v, %v", probes, key, r, err)
						}
						limits[r.Limit]++
						checkCostJudged(t, fmt.Sprintf("probe %d, %s: AllowN(%d)", probes, key, n), n, r.Limit, func() (floodgate.Decision, time.Duration, error) {
							d, err := l.AllowN(ctx, key, n)
							return d, 0, err
						})
						if !k.reserves { // a bucket's refund takes any n
							// What the key may have been charged: under
							// its rate or the published one.
							err := l.(floodgate.Refunder).RefundN(ctx, key, n)
							if most := max(r.Limit, c.from); n > most && !errors.Is(err, floodgate.ErrCostExceedsLimit) || n <= most && err != nil {
								t.Fatalf("probe %d, %s: RefundN(%d) with the key's Limit %d: %v", probes, key, n, r.Limit, err)
							}
						}
						if k.reserves {
							checkCostJudged(t, fmt.Sprintf("probe %d, %s: ReserveN(%d)", probes, key, n), n, r.Limit, func() (floodgate.Decision, time.Duration, error) {
								res, err := l.(floodgate.Reserver).ReserveN(ctx, key, n, time.Hour)
								return res.Decision, res.Wait, err
							})
						}
					}
					if len(limits) == 2 {
						for lim, count := range limits {
							seen[lim] += count
						}
					}
				}
				if err := l.(floodgate.RateSetter).SetRate(ctx, floodgate.RateChange{Rate: floodgate.Rate{Limit: c.to, Period: time.Minute}}); err != nil {
					t.Fatal(err)
				}
				probe = nil
				// Some probe saw keys under both rates at once: the window
				// this test is about was there.
				if seen[c.from] == 0 || seen[c.to] == 0 {
					t.Fatalf("no probe saw keys under both rates (%d probes, %v)", probes, seen)
				}
			})
		}
	}
}

// checkCostJudged calls do, which asks for n units of a key whose rate has
// capacity limit (a report's Limit at that moment), and checks that its
// outcome is judged by that capacity: above it, ErrCostExceedsLimit with
// that Limit, denied, no RetryAfter, no wait; within it, no error and the
// same Limit, allowed or denied with a RetryAfter.
func checkCostJudged(t *testing.T, what string, n, limit int, do func() (floodgate.Decision, time.Duration, error)) {
	t.Helper()
	d, wait, err := do()
	if d.Limit != limit {
		t.Fatalf("%s: Limit %d, the key's rate has %d (%+v, %v)", what, d.Limit, limit, d, err)
	}
	if n > limit {
		if !errors.Is(err, floodgate.ErrCostExceedsLimit) || d.Allowed || d.RetryAfter != 0 || wait != 0 {
			t.Fatalf("%s above the key's capacity %d: %+v wait %v, %v; want ErrCostExceedsLimit, denied, no RetryAfter", what, limit, d, wait, err)
		}
		return
	}
	if err != nil || (!d.Allowed && d.RetryAfter <= 0) {
		t.Fatalf("%s within the key's capacity %d: %+v, %v; want no error, allowed or a RetryAfter", what, limit, d, err)
	}
}
