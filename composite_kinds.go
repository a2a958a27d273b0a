package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file holds what a Composite does for the admission kinds beyond a
// rate: charging after the call (Charger), booking ahead (Reserver) and
// holding slots (Releaser). A Composite has every method, but can do each
// only as far as its members can; the admission core asks canCharge,
// canReserve and holdsSlots before it relies on one.

// every reports whether ok holds for each of c's limiters.
func (c *Composite) every(ok func(Limiter) bool) bool {
	for _, l := range c.limiters {
		if !ok(l) {
			return false
		}
	}
	return true
}

// holdsSlots reports whether l holds slots that a call releases when it
// settles: a Releaser, or a Composite with one among its members.
func holdsSlots(l Limiter) bool {
	if c, ok := l.(*Composite); ok {
		return !c.every(func(m Limiter) bool { return !holdsSlots(m) })
	}
	_, ok := l.(Releaser)
	return ok
}

// ChargeN charges n units to every limiter that implements Charger, so
// that a Composite can go into debt with its members; limiters that hold
// slots (InFlight) are not charged. Errors are joined.
func (c *Composite) ChargeN(ctx context.Context, key string, n int) error {
	var errs []error
	for _, l := range c.limiters {
		if ch, ok := l.(Charger); ok {
			if err := ch.ChargeN(ctx, key, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ReleaseN releases n slots in every limiter that holds slots (a
// Releaser, such as InFlight), and only there. Errors are joined.
func (c *Composite) ReleaseN(ctx context.Context, key string, n int, held time.Duration) error {
	var errs []error
	for _, l := range c.limiters {
		if r, ok := l.(Releaser); ok && holdsSlots(l) {
			if err := r.ReleaseN(ctx, key, n, held); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ReserveN books n units in every limiter, or in none: the Reservation is
// Allowed if each limiter booked them within maxWait, with the longest of
// their waits; otherwise what was booked is given back, and the Decision
// is the denial of the limiters that could not book (merged as AllowN
// merges). Every limiter must implement Reserver; one that does not
// makes every ReserveN fail with ErrInvalidOption.
func (c *Composite) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (Reservation, error) {
	var (
		repBuf   [compositeInline]Decision
		takenBuf [compositeInline]bool
		rep      = repBuf[:0]
		taken    = takenBuf[:0]
		wait     time.Duration
	)
	if !c.every(canReserve) {
		return Reservation{}, errNotReserver
	}
	for _, l := range c.limiters {
		r, err := l.(Reserver).ReserveN(ctx, key, n, maxWait)
		if err != nil {
			return Reservation{Decision: r.Decision}, giveBack(ctx, c.limiters[:len(taken)], key, n, taken, err)
		}
		rep, taken = append(rep, r.Decision), append(taken, r.Allowed)
		if !r.Allowed {
			denials := rep[len(rep)-1:]
			return Reservation{Decision: merge(denials, false)}, giveBack(ctx, c.limiters[:len(taken)], key, n, taken, nil)
		}
		wait = max(wait, r.Wait)
	}
	return Reservation{Decision: merge(rep, true), Wait: wait}, nil
}

// errNotReserver is ReserveN's error on a Composite with a member that
// cannot book ahead.
var errNotReserver = fmt.Errorf("%w: a limiter of this Composite cannot book ahead (Reserver)", ErrInvalidOption)

// undoTake gives back n units that AllowN took from l: released if l
// holds slots, refunded if it refunds (a Composite may do both).
func undoTake(ctx context.Context, l Limiter, key string, n int) error {
	var released, refunded error
	if r, ok := l.(Releaser); ok && holdsSlots(l) {
		released = r.ReleaseN(ctx, key, n, 0)
	}
	if r, ok := l.(Refunder); ok {
		refunded = r.RefundN(ctx, key, n)
	}
	return errors.Join(released, refunded)
}

var (
	_ Charger  = (*Composite)(nil)
	_ Releaser = (*Composite)(nil)
	_ Reserver = (*Composite)(nil)
)
