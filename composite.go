package floodgate

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/floodgate-go/floodgate/internal/yield"
)

// Refunder is implemented by limiters that can give back units an allowed
// AllowN took, as if that call had not happened (within the limiter's own
// bounds: a token bucket is never filled above its burst). Composite uses
// it to undo a partial consumption; TokenBucket, SlidingLog and
// SlidingCounter implement it.
type Refunder interface {
	RefundN(ctx context.Context, key string, n int) error
}

// Composite applies several limits to the same key at once, all or
// nothing: for example 10 per minute and 100 per hour. Build it with All.
//
// AllowN(ctx, key, n) first asks every limiter with n == 0, which consumes
// nothing, and compares each Decision.Remaining with n:
//   - if some limiter cannot fit n, the request is denied. Those limiters
//     are then asked for n, to learn their exact RetryAfter (they deny, and
//     a denial consumes nothing); the others are not asked at all.
//   - otherwise n is taken from each limiter in turn: first those that
//     can give units back (Refunder, or Releaser for an in-flight limit's
//     slots), then the others, each group in the order given to All.
//
// Guarantees. An allowed request took n units from every limiter. A denied
// request consumed nothing, unless a limiter's state changed between the
// first look and the take (a concurrent caller on the same key, or time
// passing): then a limiter may allow while another denies. Units taken
// from limiters that implement Refunder are given back with RefundN, and
// slots of one that holds them with ReleaseN; units taken from a limiter
// that does neither stay taken
// (at most n per such limiter and race), which is why those are asked
// last. While taken, the units are not available to concurrent callers.
//
// The Decision reports the most restrictive limit. Allowed: Limit and
// Remaining of the limiter with the fewest units left. Denied: RetryAfter
// and Limit of the limiter that needs the longest wait (so a retry after
// RetryAfter fits in every limit, if nothing else consumes meanwhile). In
// both cases Remaining is the smallest over all limiters and ResetAfter the
// longest. Overloaded is set when every limiter that denied was
// overloaded (a service-wide in-flight cap): a denial of the key's own
// limits is the client's.
//
// A limiter without a limit at the moment of the call (a SharedLimiter
// over rate.Inf) is left out of the decision: it allows every cost, so
// neither its Limit (the rate.Limiter's burst, which rate.Inf ignores, and
// may be 0) nor its Remaining must read as a cap. All of tb and such a
// limiter decides exactly as tb alone.
//
// A Composite is safe for concurrent use if its limiters are.
type Composite struct {
	limiters []Limiter // in the order they are consumed: those that give back first
	// mayBeUnlimited reports that some limiter implements unbounded, so
	// AllowN must check which are unlimited on each call.
	mayBeUnlimited bool
}

// unbounded is implemented by limiters that may have no limit at all, for
// a while or for good: a SharedLimiter whose rate.Limiter is at rate.Inf
// (its limit can be changed at run time). While unlimited such a limiter
// allows every cost and keeps no state, so leaving it out of a decision
// changes nothing but the Decision's numbers.
type unbounded interface{ unlimited() bool }

// All returns a Composite that allows a request only if every one of
// limiters does. It needs at least one limiter, and refuses with an error
// wrapping ErrInvalidOption nil ones and two that keep their state in one
// place: one limiter given twice, or two limiters that report the same
// Namespace (two Redis limiters with one key prefix), which would count
// each request twice in one state, by two limits' rules.
func All(limiters ...Limiter) (*Composite, error) {
	if len(limiters) == 0 {
		return nil, fmt.Errorf("%w: All needs at least one limiter", ErrInvalidOption)
	}
	c := &Composite{limiters: make([]Limiter, 0, len(limiters))}
	for i, l := range limiters {
		if isNil(l) {
			return nil, fmt.Errorf("%w: limiter %d given to All is nil", ErrInvalidOption, i)
		}
		if canGiveBack(l) {
			c.limiters = append(c.limiters, l)
		}
		if _, ok := l.(unbounded); ok {
			c.mayBeUnlimited = true
		}
	}
	for _, l := range limiters {
		if !canGiveBack(l) {
			c.limiters = append(c.limiters, l)
		}
	}
	if err := distinctLimits(limiters); err != nil {
		return nil, err
	}
	return c, nil
}

// canGiveBack reports whether units taken from l can be given back: it
// refunds, or it holds slots, which are released.
func canGiveBack(l Limiter) bool {
	_, ok := l.(Refunder)
	return ok || holdsSlots(l)
}

// isNil reports whether l is nil or a nil pointer in an interface, which
// would panic on its first call.
func isNil(l Limiter) bool {
	if l == nil {
		return true
	}
	v := reflect.ValueOf(l)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		return v.IsNil()
	}
	return false
}

// Allow is AllowN(ctx, key, 1).
func (c *Composite) Allow(ctx context.Context, key string) (Decision, error) {
	return c.AllowN(ctx, key, 1)
}

// compositeInline is how many limiters AllowN tracks on the stack; more
// cost one allocation per call.
const compositeInline = 4

// AllowN takes n units for key from every limiter, or from none; see
// Composite for the algorithm and its guarantees. A cost above the Limit
// of any limiter returns ErrCostExceedsLimit (an unlimited one has none);
// an error from a limiter is returned as it is, after giving back what was
// taken.
func (c *Composite) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if n < 0 {
		return Decision{}, fmt.Errorf("%w: n = %d is negative", ErrInvalidCost, n)
	}
	limiters := c.limiters
	var boundedBuf [compositeInline]Limiter
	if c.mayBeUnlimited {
		limiters = boundedBuf[:0]
		if len(c.limiters) > compositeInline {
			limiters = make([]Limiter, 0, len(c.limiters))
		}
		for _, l := range c.limiters {
			if u, ok := l.(unbounded); !ok || !u.unlimited() {
				limiters = append(limiters, l)
			}
		}
		if len(limiters) == 0 {
			// Every limit is off: any of them answers for all.
			return c.limiters[0].AllowN(ctx, key, n)
		}
	}
	return allowAll(ctx, limiters, key, n)
}

// allowAll is AllowN over limiters, the Composite's limiters that have a
// limit right now, in consumption order.
func allowAll(ctx context.Context, limiters []Limiter, key string, n int) (Decision, error) {
	var (
		repBuf   [compositeInline]Decision
		takenBuf [compositeInline]bool
		rep      = repBuf[:0]   // the decision each limiter reports
		taken    = takenBuf[:0] // whether n was taken from it
	)
	if len(limiters) > compositeInline {
		rep = make([]Decision, 0, len(limiters))
		taken = make([]bool, 0, len(limiters))
	}
	blocked := false
	for _, l := range limiters {
		yield.Point(ctx, "Composite: before a limiter's first look")
		d, err := l.AllowN(ctx, key, 0)
		if err != nil {
			return Decision{}, err
		}
		if n > d.Limit {
			d.Allowed = false
			return d, fmt.Errorf("%w: n = %d, one of the limits is %d", ErrCostExceedsLimit, n, d.Limit)
		}
		rep = append(rep, d)
		taken = append(taken, false)
		blocked = blocked || d.Remaining < n
	}
	if n == 0 {
		return merge(rep, true), nil
	}

	if blocked {
		// Ask only the limiters that cannot fit, for their RetryAfter.
		for i, l := range limiters {
			if rep[i].Remaining >= n {
				continue
			}
			yield.Point(ctx, "Composite: before asking a limiter that cannot fit")
			d, err := l.AllowN(ctx, key, n)
			if err != nil {
				return Decision{}, giveBack(ctx, limiters, key, n, taken, err)
			}
			if d.Allowed { // room appeared since the first look
				taken[i] = true
				continue
			}
			rep[i] = d
		}
		if denied(rep) {
			return merge(rep, false), giveBack(ctx, limiters, key, n, taken, nil)
		}
	}

	for i, l := range limiters {
		if taken[i] {
			continue
		}
		yield.Point(ctx, "Composite: before a limiter's take")
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return Decision{}, giveBack(ctx, limiters, key, n, taken, err)
		}
		if !d.Allowed { // lost a race with a concurrent caller
			rep[i] = d
			return merge(rep, false), giveBack(ctx, limiters, key, n, taken, nil)
		}
		rep[i], taken[i] = d, true
	}
	return merge(rep, true), nil
}

// denied reports whether any of ds is a denial (the first look, with
// n == 0, always allows).
func denied(ds []Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return true
		}
	}
	return false
}

// giveBack refunds n units to every one of limiters that they were taken
// from, in reverse order, and returns cause joined with any refund error.
func giveBack(ctx context.Context, limiters []Limiter, key string, n int, taken []bool, cause error) error {
	var errs []error
	for i := len(limiters) - 1; i >= 0; i-- {
		if !taken[i] {
			continue
		}
		if err := undoTake(ctx, limiters[i], key, n); err != nil {
			errs = append(errs, fmt.Errorf("floodgate: composite could not give back %d units: %w", n, err))
		}
	}
	if len(errs) == 0 {
		return cause
	}
	return errors.Join(append([]error{cause}, errs...)...)
}

// merge combines per-limiter decisions into the one Composite reports.
func merge(ds []Decision, allowed bool) Decision {
	out := Decision{Allowed: allowed, Remaining: ds[0].Remaining, Limit: ds[0].Limit, Overloaded: !allowed}
	for _, d := range ds {
		if !d.Allowed && !d.Overloaded {
			out.Overloaded = false
		}
		if d.ResetAfter > out.ResetAfter {
			out.ResetAfter = d.ResetAfter
		}
		if d.Remaining < out.Remaining {
			out.Remaining = d.Remaining
			if allowed {
				out.Limit = d.Limit
			}
		}
		if !allowed && d.RetryAfter > out.RetryAfter {
			out.RetryAfter = d.RetryAfter
			out.Limit = d.Limit
		}
	}
	return out
}

// unlimited reports whether every one of c's limiters is unlimited right
// now, so that a Composite nested in another is left out of the outer
// decision as its limiters are of its own.
func (c *Composite) unlimited() bool {
	if !c.mayBeUnlimited {
		return false
	}
	for _, l := range c.limiters {
		if u, ok := l.(unbounded); !ok || !u.unlimited() {
			return false
		}
	}
	return true
}

// RefundN gives n units back to every limiter that implements Refunder,
// so that a Composite can itself be part of a Composite. Errors are
// joined.
func (c *Composite) RefundN(ctx context.Context, key string, n int) error {
	var errs []error
	for _, l := range c.limiters {
		if r, ok := l.(Refunder); ok {
			if err := r.RefundN(ctx, key, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Reset resets key in every limiter that implements Resetter; the others
// keep their state. Errors are joined.
func (c *Composite) Reset(ctx context.Context, key string) error {
	var errs []error
	for _, l := range c.limiters {
		if r, ok := l.(Resetter); ok {
			if err := r.Reset(ctx, key); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

var (
	_ Limiter   = (*Composite)(nil)
	_ Refunder  = (*Composite)(nil)
	_ Resetter  = (*Composite)(nil)
	_ unbounded = (*Composite)(nil)
	_ Refunder  = (*TokenBucket)(nil)
)
