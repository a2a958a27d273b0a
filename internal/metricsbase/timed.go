package metricsbase

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Timed returns a Limiter that passes each AllowN to l and reports how
// long it took to record, on the clock now (the adapters' clock, which
// their tests replace). Refunds and resets are not timed.
//
// The result implements floodgate.Refunder and floodgate.Resetter exactly
// when l does, so that floodgate.All treats it as it would l, and has a
// Rate method that returns l's rate, or the zero Rate if l reports none,
// so that the middleware still advertises it in RateLimit-Policy.
func Timed(l floodgate.Limiter, now func() time.Time, record func(context.Context, time.Duration)) floodgate.Limiter {
	t := &timed{l: l, now: now, record: record}
	_, refunds := l.(floodgate.Refunder)
	_, resets := l.(floodgate.Resetter)
	switch {
	case refunds && resets:
		return timedRefundResetter{t}
	case refunds:
		return timedRefunder{t}
	case resets:
		return timedResetter{t}
	}
	return t
}

// rater is implemented by limiters that report their rate.
type rater interface{ Rate() floodgate.Rate }

// timed records the duration of each decision of l.
type timed struct {
	l      floodgate.Limiter
	now    func() time.Time
	record func(context.Context, time.Duration)
}

// AllowN implements floodgate.Limiter.
func (t *timed) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	start := t.now()
	d, err := t.l.AllowN(ctx, key, n)
	t.record(ctx, t.now().Sub(start))
	return d, err
}

// Rate returns the wrapped limiter's rate, or the zero Rate.
func (t *timed) Rate() floodgate.Rate {
	if r, ok := t.l.(rater); ok {
		return r.Rate()
	}
	return floodgate.Rate{}
}

type timedRefunder struct{ *timed }

// RefundN implements floodgate.Refunder.
func (t timedRefunder) RefundN(ctx context.Context, key string, n int) error {
	return t.l.(floodgate.Refunder).RefundN(ctx, key, n)
}

type timedResetter struct{ *timed }

// Reset implements floodgate.Resetter.
func (t timedResetter) Reset(ctx context.Context, key string) error {
	return t.l.(floodgate.Resetter).Reset(ctx, key)
}

type timedRefundResetter struct{ *timed }

// RefundN implements floodgate.Refunder.
func (t timedRefundResetter) RefundN(ctx context.Context, key string, n int) error {
	return t.l.(floodgate.Refunder).RefundN(ctx, key, n)
}

// Reset implements floodgate.Resetter.
func (t timedRefundResetter) Reset(ctx context.Context, key string) error {
	return t.l.(floodgate.Resetter).Reset(ctx, key)
}

var (
	_ floodgate.Limiter  = (*timed)(nil)
	_ floodgate.Refunder = timedRefunder{}
	_ floodgate.Resetter = timedResetter{}
	_ floodgate.Refunder = timedRefundResetter{}
	_ floodgate.Resetter = timedRefundResetter{}
)
