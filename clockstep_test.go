package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// clockStepLimiters builds each in-memory limiter on an injected clock.
var clockStepLimiters = map[string]func(floodgate.Rate, func() time.Time) (floodgate.Limiter, error){
	"token bucket": func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
		return floodgate.NewTokenBucket(r, floodgate.WithClock(now))
	},
	"token bucket, interval refill": func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
		return floodgate.NewTokenBucket(r, floodgate.WithClock(now), floodgate.WithIntervalRefill())
	},
	"sliding log": func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
		return floodgate.NewSlidingLog(r, floodgate.WithClock(now))
	},
	"sliding log, denied counted": func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
		return floodgate.NewSlidingLog(r, floodgate.WithClock(now), floodgate.WithCountDenied())
	},
	"sliding counter": func(r floodgate.Rate, now func() time.Time) (floodgate.Limiter, error) {
		return floodgate.NewSlidingCounter(r, floodgate.WithClock(now))
	},
}

// A wall-clock step backwards (an NTP correction, an operator) must neither
// release a limited client nor block an idle one: the store holds the
// latest time it has seen until the clock catches up.
func TestClockStepBackwards(t *testing.T) {
	rate := floodgate.Rate{Limit: 5, Period: time.Minute}
	for name, build := range clockStepLimiters {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			lim, err := build(rate, func() time.Time { return now })
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// "limited" spends its quota; "idle" has not been seen for an hour.
			if d, err := lim.AllowN(ctx, "idle", 1); err != nil || !d.Allowed {
				t.Fatalf("idle's first event: %+v %v", d, err)
			}
			now = now.Add(time.Hour)
			if d, err := lim.AllowN(ctx, "limited", rate.Limit); err != nil || !d.Allowed {
				t.Fatalf("limited's burst: %+v %v", d, err)
			}
			denied, err := lim.AllowN(ctx, "limited", 1)
			if err != nil || denied.Allowed || denied.RetryAfter <= 0 {
				t.Fatalf("limited is not limited: %+v %v", denied, err)
			}
			stepped := now
			for _, back := range []time.Duration{24 * time.Hour, 10 * time.Minute, time.Second} {
				now = stepped.Add(-back)
				if d, _ := lim.AllowN(ctx, "limited", 1); d.Allowed {
					t.Errorf("clock %s back: the limited client was released: %+v", back, d)
				}
				if d, _ := lim.AllowN(ctx, "idle", 0); !d.Allowed || d.Remaining != rate.Limit {
					t.Errorf("clock %s back: the idle client is blocked: %+v", back, d)
				}
			}
			// Once the clock is past the original RetryAfter again, the
			// limited client gets exactly what it was promised.
			now = stepped.Add(denied.RetryAfter - time.Millisecond)
			if d, _ := lim.AllowN(ctx, "limited", 1); d.Allowed {
				t.Errorf("allowed 1ms before the promised RetryAfter: %+v", d)
			}
			now = stepped.Add(denied.RetryAfter)
			if d, _ := lim.AllowN(ctx, "limited", 1); !d.Allowed {
				t.Errorf("denied at the promised RetryAfter: %+v", d)
			}
		})
	}
}
