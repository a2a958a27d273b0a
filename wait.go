package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrWouldExceedDeadline reports that WaitN gave up at once because the
// context's deadline comes before the request could be allowed. The error
// also matches context.DeadlineExceeded, so code that treats a timeout as a
// timeout needs no change.
var ErrWouldExceedDeadline = errors.New("floodgate: wait would exceed the context deadline")

// minWait is the shortest sleep between two attempts. A denial always
// carries a positive RetryAfter from the limiters of this module; the floor
// only keeps a limiter that reports zero from turning WaitN into a busy loop.
const minWait = time.Millisecond

// Wait is WaitN(ctx, l, key, 1).
func Wait(ctx context.Context, l Limiter, key string) error {
	return WaitN(ctx, l, key, 1)
}

// WaitN blocks until l allows n units for key, and consumes them. It works
// with any Limiter, in memory or remote: it calls l.AllowN, and on a denial
// sleeps for the decision's RetryAfter and tries again.
//
// It returns nil once allowed, and an error without waiting when:
//   - ctx is already done (ctx.Err(); nothing is consumed);
//   - AllowN returns an error, for example ErrCostExceedsLimit for a cost
//     that can never be allowed, or a store that cannot be reached;
//   - ctx has a deadline before now + RetryAfter: the error wraps both
//     ErrWouldExceedDeadline and context.DeadlineExceeded.
//
// If ctx is done while it sleeps, it returns ctx.Err().
//
// Waiters are not queued. Unlike a golang.org/x/time/rate reservation,
// which books future tokens for each caller in turn, WaitN only retries:
// the units go to whichever caller asks first once they are back, so under
// contention a waiter may be overtaken by later callers and wait several
// rounds (there is no fairness), but a waiter that gives up never holds
// tokens it did not use.
func WaitN(ctx context.Context, l Limiter, key string, n int) error {
	return systemWaiter.waitN(ctx, l, key, n)
}

// waiter holds the two things WaitN takes from the outside world, so that
// tests can run it on a fake clock and fire its timers by hand.
type waiter struct {
	now   func() time.Time
	after func(d time.Duration) (c <-chan time.Time, stop func() bool)
}

var systemWaiter = waiter{
	now: time.Now,
	after: func(d time.Duration) (<-chan time.Time, func() bool) {
		t := time.NewTimer(d)
		return t.C, t.Stop
	},
}

func (w waiter) waitN(ctx context.Context, l Limiter, key string, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		wait := d.RetryAfter
		if wait < minWait {
			wait = minWait
		}
		if deadline, ok := ctx.Deadline(); ok && w.now().Add(wait).After(deadline) {
			return fmt.Errorf("%w: n = %d needs %s, deadline in %s: %w",
				ErrWouldExceedDeadline, n, wait, deadline.Sub(w.now()), context.DeadlineExceeded)
		}
		c, stop := w.after(wait)
		select {
		case <-c:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
}
