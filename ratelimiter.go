package floodgate

import (
	"context"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// SharedLimiter makes an existing golang.org/x/time/rate Limiter a
// Limiter. The key is ignored: every key draws from the one bucket, which
// makes it a server-wide cap (for example in a Composite with per-client
// limits, or in front of a fragile backend). Build it with FromRateLimiter.
//
// A denied request consumes nothing: AllowN reserves the tokens and, if
// the reservation would have to wait, cancels it at once. The Decision
// reports the bucket's burst as Limit, the whole tokens left as Remaining,
// and as RetryAfter and ResetAfter the first nanosecond at which the
// rate.Limiter's own float64 arithmetic allows the request or holds a
// full bucket (a plain conversion of tokens to time can be off by a
// nanosecond either way). The rate.Limiter may
// still be used directly elsewhere (and its limit and burst changed at
// run time); its reservations are honoured.
//
// SharedLimiter does not implement Refunder: x/time/rate can give tokens
// back only by cancelling a pending reservation.
//
// Degenerate rate.Limiters keep x/time/rate's meaning:
//   - rate.Inf (whatever the burst, 0 included) is no limit: every cost is
//     allowed and the Decision reports the burst as Limit and Remaining.
//     In a Composite (All) such a limiter is left out, so it never caps
//     the others nor reports ErrCostExceedsLimit.
//   - a burst of 0 with a finite rate never allows anything: every cost
//     above 0 is ErrCostExceedsLimit, since no wait can help.
//   - a rate of 0 (or below) with a burst spends the burst once and never
//     refills: once the bucket holds less than the cost, that cost is
//     ErrCostExceedsLimit.
type SharedLimiter struct {
	lim *rate.Limiter
	now func() time.Time
}

// FromRateLimiter returns a SharedLimiter drawing from l. Of the options,
// only WithClock applies (it should be the clock that every other user of
// l passes to its …At and …N methods); the others are refused with
// ErrInvalidOption, as is a nil l.
func FromRateLimiter(l *rate.Limiter, opts ...Option) (*SharedLimiter, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil *rate.Limiter", ErrInvalidOption)
	}
	c, err := newConfig(kindShared, opts)
	if err != nil {
		return nil, err
	}
	s := &SharedLimiter{lim: l, now: c.now}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Allow is AllowN(ctx, key, 1).
func (s *SharedLimiter) Allow(ctx context.Context, key string) (Decision, error) {
	return s.AllowN(ctx, key, 1)
}

// AllowN takes n tokens from the shared bucket if it holds them, whatever
// the key, and reports the decision either way; n == 0 reports without
// taking. A cost above the burst returns ErrCostExceedsLimit, and so does a
// cost the bucket does not hold when its limit is zero (it never refills).
// An infinite limit allows everything and reports a full bucket.
func (s *SharedLimiter) AllowN(_ context.Context, _ string, n int) (Decision, error) {
	if n < 0 {
		return Decision{}, fmt.Errorf("%w: n = %d is negative", ErrInvalidCost, n)
	}
	now := s.now()
	limit, burst := s.lim.Limit(), s.lim.Burst()
	d := Decision{Limit: burst}
	if limit == rate.Inf {
		d.Allowed, d.Remaining = true, burst
		return d, nil
	}
	if n > burst {
		return d, fmt.Errorf("%w: n = %d, burst %d", ErrCostExceedsLimit, n, burst)
	}
	if limit <= 0 {
		if !s.lim.AllowN(now, n) {
			d.Remaining = s.remaining(now, burst)
			return d, fmt.Errorf("%w: n = %d, the limiter never refills and holds %d", ErrCostExceedsLimit, n, d.Remaining)
		}
		d.Allowed, d.Remaining = true, s.remaining(now, burst)
		return d, nil
	}
	if n == 0 {
		d.Allowed = true
	} else {
		r := s.lim.ReserveN(now, n)
		if !r.OK() { // the burst shrank since we read it
			return Decision{Limit: s.lim.Burst()}, fmt.Errorf("%w: n = %d, burst %d", ErrCostExceedsLimit, n, s.lim.Burst())
		}
		if r.DelayFrom(now) == 0 {
			d.Allowed = true
		} else {
			r.CancelAt(now)
			d.RetryAfter = s.until(now, float64(n), limit, false)
		}
	}
	d.Remaining = s.remaining(now, burst)
	d.ResetAfter = s.until(now, float64(burst), limit, true)
	return d, nil
}

// remaining returns the whole tokens in the bucket at now, within [0, burst].
func (s *SharedLimiter) remaining(now time.Time, burst int) int {
	t := math.Floor(s.lim.TokensAt(now))
	switch {
	case t < 0:
		return 0
	case t > float64(burst):
		return burst
	}
	return int(t)
}

// until returns the shortest wait after which the bucket holds want
// tokens (full: exactly; a request: as x/time/rate itself decides, which
// also allows a deficit too small to round to a nanosecond). x/time/rate
// converts between tokens and time in float64 and truncates, so a float
// estimate is stepped, a few nanoseconds at most, until it is the first
// instant the limiter's own arithmetic agrees with.
func (s *SharedLimiter) until(now time.Time, want float64, limit rate.Limit, full bool) time.Duration {
	ready := func(d time.Duration) bool {
		missing := want - s.lim.TokensAt(now.Add(d))
		if full || missing <= 0 {
			return missing <= 0
		}
		return time.Duration(missing/float64(limit)*float64(time.Second)) == 0
	}
	missing := want - s.lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	secs := missing / float64(limit)
	if secs >= float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	d := time.Duration(secs * float64(time.Second))
	for i := 0; i < 16 && d > 1 && ready(d-1); i++ {
		d--
	}
	for i := 0; i < 16 && !ready(d); i++ {
		d++
	}
	return d
}

// unlimited reports whether the rate.Limiter is at rate.Inf right now, so
// that a Composite leaves it out of its decision.
func (s *SharedLimiter) unlimited() bool { return s.lim.Limit() == rate.Inf }

var (
	_ Limiter   = (*SharedLimiter)(nil)
	_ unbounded = (*SharedLimiter)(nil)
)
