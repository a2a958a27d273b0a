package floodgate

import (
	"fmt"
	"sync"
	"time"
)

// TokenBucketPlans returns a PlanConfig.New that builds an in-memory
// token bucket for each plan: at the plan's rate, with the plan's burst
// (so opts must not give WithBurst), and opts (WithMaxKeys, applying to
// each plan's bucket, WithIntervalRefill, WithClock...). Its buckets
// share one clock, so that a key's state moves between them exactly when
// its plan changes; limiters built separately do not (their times start
// at their own creation), and a PlanLimiter refuses to move a key between
// them.
func TokenBucketPlans(opts ...Option) func(Plan) (Limiter, error) {
	return planFactory(kindTokenBucket, opts, func(p Plan, opts []Option) (Limiter, error) {
		if p.Burst > 0 {
			opts = append(opts, WithBurst(p.Burst))
		}
		return NewTokenBucket(p.Rate, opts...)
	})
}

// SlidingLogPlans is TokenBucketPlans for sliding logs; a plan's Burst
// must be 0.
func SlidingLogPlans(opts ...Option) func(Plan) (Limiter, error) {
	return planFactory(kindSlidingLog, opts, func(p Plan, opts []Option) (Limiter, error) {
		return NewSlidingLog(p.Rate, opts...)
	})
}

// SlidingCounterPlans is TokenBucketPlans for sliding counters; a plan's
// Burst must be 0.
func SlidingCounterPlans(opts ...Option) func(Plan) (Limiter, error) {
	return planFactory(kindCounter, opts, func(p Plan, opts []Option) (Limiter, error) {
		return NewSlidingCounter(p.Rate, opts...)
	})
}

// planFactory returns a factory building limiters of kind with opts and
// one clock, made from opts the first time it is called.
func planFactory(kind string, opts []Option, build func(Plan, []Option) (Limiter, error)) func(Plan) (Limiter, error) {
	var (
		once sync.Once
		clk  clock
		err  error
	)
	return func(p Plan) (Limiter, error) {
		once.Do(func() {
			var c config
			if c, err = newConfig(kind, opts); err == nil {
				clk = newClock(c.now)
			}
		})
		if err != nil {
			return nil, err
		}
		if p.Burst > 0 && kind != kindTokenBucket {
			return nil, fmt.Errorf("%w: plan %q has a burst, and a %s has none", ErrInvalidOption, p.Name, kind)
		}
		return build(p, append([]Option{withSharedClock(&clk)}, opts...))
	}
}

// withSharedClock makes the limiter read clk, shared with others.
func withSharedClock(clk *clock) Option {
	return func(c *config) error {
		c.clock = clk
		return nil
	}
}

// idleIn returns how long until every bucket is full (see planMover).
func (b *TokenBucket) idleIn() time.Duration { return b.store.idleIn() }

// idleIn returns how long until every log is empty (see planMover).
func (l *SlidingLog) idleIn() time.Duration { return l.store.idleIn() }

// idleIn returns how long until no count weighs (see planMover).
func (sc *SlidingCounter) idleIn() time.Duration { return sc.store.idleIn() }
