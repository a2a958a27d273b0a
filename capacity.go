package floodgate

import (
	"fmt"
	"math"

	"golang.org/x/time/rate"
)

// Capacitor is implemented by limiters that know the largest cost a single
// AllowN can ever be allowed: a token bucket's burst, a window's Limit.
// A cost above it fails with ErrCostExceedsLimit on every request, however
// long the client waits, so NewMiddleware and NewPolicyMiddleware refuse a
// WithCost above the Capacity of the limiter (or of any policy's limiter)
// at construction instead.
//
// Capacity returns NoCapacityBound when the limiter holds no bound (an
// infinite x/time/rate limit) or cannot tell. Every limiter of this
// package implements Capacitor.
type Capacitor interface {
	Capacity() int
}

// NoCapacityBound is the Capacity of a limiter that allows any cost.
const NoCapacityBound = math.MaxInt

// Capacity returns the bucket's burst: no request can take more.
func (b *TokenBucket) Capacity() int { return b.Burst() }

// Capacity returns Rate.Limit: no request can take more in one window.
func (l *SlidingLog) Capacity() int { return l.Rate().Limit }

// Capacity returns Rate.Limit: no request can take more in one window.
func (sc *SlidingCounter) Capacity() int { return sc.Rate().Limit }

// Capacity returns the smallest Capacity of the limiters that report one
// (a request must fit in every limit), or NoCapacityBound if none does.
func (c *Composite) Capacity() int {
	capacity := NoCapacityBound
	for _, l := range c.limiters {
		if cp, ok := l.(Capacitor); ok {
			capacity = min(capacity, cp.Capacity())
		}
	}
	return capacity
}

// Capacity returns the rate.Limiter's burst at the time of the call, or
// NoCapacityBound if its limit is rate.Inf (which allows everything). The
// burst can be changed at run time with rate.Limiter.SetBurst; a
// middleware checks its cost against the burst it sees when it is built.
func (s *SharedLimiter) Capacity() int {
	if s.lim.Limit() == rate.Inf {
		return NoCapacityBound
	}
	return s.lim.Burst()
}

// checkCapacity refuses a fixed cost that limiter l can never allow.
func checkCapacity(policy string, l Limiter, cost int) error {
	cp, ok := l.(Capacitor)
	if !ok {
		return nil
	}
	if c := cp.Capacity(); cost > c {
		return fmt.Errorf("policy %q: %w: cost %d is above the limiter's capacity %d, so every request would be refused (%w)",
			policy, ErrInvalidOption, cost, c, ErrCostExceedsLimit)
	}
	return nil
}

var (
	_ Capacitor = (*TokenBucket)(nil)
	_ Capacitor = (*SlidingLog)(nil)
	_ Capacitor = (*SlidingCounter)(nil)
	_ Capacitor = (*Composite)(nil)
	_ Capacitor = (*SharedLimiter)(nil)
)
