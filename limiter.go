package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter decides whether an event identified by a key may happen now.
//
// Every limiter in this module, in memory or on Redis, implements it with the
// same semantics, so code written against Limiter does not change when a
// service moves from one machine to many.
type Limiter interface {
	// AllowN consumes n units for key if the limit has room for all n,
	// and reports the decision either way. n == 0 reports without consuming.
	//
	// A non-nil error means no decision could be made (invalid input, a
	// store that cannot be reached) or, for ErrCostExceedsLimit, that the
	// request can never be allowed; the returned Decision then has
	// Allowed == false.
	AllowN(ctx context.Context, key string, n int) (Decision, error)
}

// Resetter is implemented by limiters that can forget the state of a key,
// giving it its full quota back (for example after a successful login).
type Resetter interface {
	Reset(ctx context.Context, key string) error
}

// Decision is the outcome of one AllowN call. It is a plain value: limiters
// return it by value so that the hot path does not allocate.
type Decision struct {
	// Allowed reports whether the n units were consumed.
	Allowed bool
	// Overloaded marks a denial by a capacity the whole service shares (a
	// NewServiceInFlight limit, or an in-flight table full of other keys'
	// slots) rather than by the key's own quota: no doing of the client's.
	// The adapters answer it as a busy service (HTTP 503, gRPC and
	// connect Unavailable), with the same RetryAfter, instead of 429 or
	// ResourceExhausted. It sits in the padding after Allowed, so a
	// Decision stays 40 bytes.
	Overloaded bool
	// Limit is the quota of the policy: events per period for a sliding
	// window, the capacity (burst) for a token bucket.
	Limit int
	// Remaining is the number of units still available right now, after this
	// decision. It is never negative and never above Limit.
	Remaining int
	// RetryAfter is, when the request was denied, the shortest wait after
	// which the same request (same key, same n) can succeed if nothing else
	// consumes in between. It is zero when the request was allowed.
	RetryAfter time.Duration
	// ResetAfter is the wait until the key is back to its full quota if
	// nothing else consumes in between.
	ResetAfter time.Duration
}

// Rate is a quota: Limit events per Period.
//
// Limit is at most 2^24 (16,777,216) events per period; a larger Limit is
// refused with ErrInvalidRate. The bound keeps every product of a count
// and a period inside int64 nanoseconds. The same bound applies to
// WithBurst and to a request's cost. A sliding log, which keeps an entry
// per decision, accepts at most MaxSlidingLogLimit (65,536); use a
// SlidingCounter or a TokenBucket above that. Above 2^24:
//   - state the same rate over a shorter period: 100,000,000 an hour is
//     Rate{Limit: 1_000_000, Period: 36 * time.Second}. For a token bucket
//     this changes nothing but the default burst (WithBurst sets it, up to
//     2^24); for a window it shortens the window, which is then what is
//     limited.
//   - or count in a coarser unit: a limit on bytes becomes one on
//     kilobytes, with each request's cost (AllowN's n) in kilobytes,
//     rounded up.
type Rate struct {
	Limit  int           // events
	Period time.Duration // per period
}

// PerSecond returns a Rate of n events per second.
func PerSecond(n int) Rate { return Rate{Limit: n, Period: time.Second} }

// PerMinute returns a Rate of n events per minute.
func PerMinute(n int) Rate { return Rate{Limit: n, Period: time.Minute} }

// PerHour returns a Rate of n events per hour.
func PerHour(n int) Rate { return Rate{Limit: n, Period: time.Hour} }

// String formats the rate as "10/1m0s".
func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.Limit, r.Period) }

// Validate reports whether r can be used by a limiter: Limit and Period must
// both be positive, and Limit at most 2^24 (see Rate for what to do above
// it). The error wraps ErrInvalidRate.
func (r Rate) Validate() error {
	switch {
	case r.Limit <= 0:
		return fmt.Errorf("%w: limit %d must be positive", ErrInvalidRate, r.Limit)
	case r.Period <= 0:
		return fmt.Errorf("%w: period %s must be positive", ErrInvalidRate, r.Period)
	case r.Limit > maxLimit:
		return fmt.Errorf("%w: limit %d is above the supported maximum %d (2^24) per period; "+
			"state the rate over a shorter period, or count in a coarser unit", ErrInvalidRate, r.Limit, maxLimit)
	}
	return nil
}

// maxLimit keeps every product of a count and a period inside int64
// nanoseconds for any period up to ~292 years / maxLimit. The sliding log,
// whose memory grows with the limit, has its own smaller bound,
// MaxSlidingLogLimit.
const maxLimit = 1 << 24

// Sentinel errors. Errors returned by this package wrap one of them, so
// callers test with errors.Is.
var (
	// ErrInvalidRate reports a Rate with a non-positive limit or period, or
	// a limit above the supported maximum of 2^24 events per period (see
	// Rate).
	ErrInvalidRate = errors.New("floodgate: invalid rate")
	// ErrInvalidOption reports an option with an invalid value, or an option
	// that does not apply to the limiter it was given to.
	ErrInvalidOption = errors.New("floodgate: invalid option")
	// ErrCostExceedsLimit reports a request for more units than the limit
	// can ever hold (n above the burst of a token bucket, or above the
	// Limit of a window). Waiting does not help, so no RetryAfter is given.
	ErrCostExceedsLimit = errors.New("floodgate: cost exceeds the limit and can never be allowed")
	// ErrInvalidCost reports a negative n.
	ErrInvalidCost = errors.New("floodgate: invalid cost")
	// ErrKeyTooLong reports a key longer than the configured maximum
	// (see WithMaxKeyLength).
	ErrKeyTooLong = errors.New("floodgate: key too long")
)

// checkCost validates n against the largest cost the limiter can ever allow.
func checkCost(n, max int) error {
	if n < 0 {
		return fmt.Errorf("%w: n = %d is negative", ErrInvalidCost, n)
	}
	if n > max {
		return fmt.Errorf("%w: n = %d, limit %d", ErrCostExceedsLimit, n, max)
	}
	return nil
}

// Compile-time checks that every in-memory limiter is a Limiter and can be
// reset.
var (
	_ Limiter  = (*TokenBucket)(nil)
	_ Resetter = (*TokenBucket)(nil)
)
