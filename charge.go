package floodgate

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Charger is implemented by limiters that can charge a key beyond its
// quota: Bucket4j's overdraft. The admission core uses it to charge a
// call's real cost once it is known, after the response
// (WithCostAfter): the key may end up owing more than its quota holds —
// in debt — and later calls are then denied, with a RetryAfter that says
// when the debt is paid, until it is.
//
// A debt is bounded: every limiter states the most a key can owe and
// saturates there rather than wrap — a token bucket at 2^62 ns of refill
// past now in memory (about 146 years), 2^51 us on Redis (71 years); a
// window's debt lasts no longer than its windows do (a sliding log's
// units leave it a Period after the last charge, a sliding counter's two
// Periods after), with a log's entries and a counter's counts bounded as
// their ChargeN says. A single charge counts at most 2^24 units, the
// largest cost. ChargeN does O(1) work whatever n (amortized for a log).
//
// A limiter whose type implements Charger but that cannot charge in its
// configuration (a redisstore limiter with leased quota) also has a
// method Charges() bool that reports false; WithCostAfter refuses it at
// construction.
type Charger interface {
	// ChargeN takes n units from key whether or not its quota holds
	// them. n above 2^24 (the largest cost) is charged as 2^24; a
	// negative n is ErrInvalidCost.
	ChargeN(ctx context.Context, key string, n int) error
}

// WithSettledCost is the transport-neutral half of WithCostAfter, for an
// adapter over a Gate: each call is admitted at its cost (WithCost, the
// adapter's Call.Cost; at least 1), taken as an estimate, and charged its
// real cost when it settles — the cost the adapter reads from the
// response (Result.Cost), or else the one its handler reported with
// ReportCost (the adapter hands the handler Outcome.Context), or else the
// estimate. The difference is given back or charged: a key may go into
// debt, and its later calls wait until it is paid. Every policy's limiter
// must implement Charger and Refunder. See WithCostAfter for the bound on
// what concurrent calls can over-spend. The net/http middleware does not
// take it: give WithCostAfter, whose cost function reads the response.
func WithSettledCost() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.costAfter = true
		c.given["WithSettledCost"] = true
		return c.once("cost after")
	}
}

// meterKey is the context key of a call's meter.
type meterKey struct{}

// meter is a call's context, carrying the cost its handler reports: one
// allocation for both. It keeps the meter of an enclosing metered limit,
// so that a report reaches every limit the call passed through.
type meter struct {
	context.Context
	parent *meter
	cost   atomic.Int64 // the reported cost + 1; 0: none reported
}

// Value returns the meter itself for meterKey.
func (m *meter) Value(key any) any {
	if key == (meterKey{}) {
		return m
	}
	return m.Context.Value(key)
}

// Context returns ctx carrying the call's meter, to hand the handler so
// that it can report the call's real cost with ReportCost, when the gate
// charges the cost after the call (WithSettledCost, WithCostAfter) and
// the call was allowed; otherwise ctx itself. Call it once per call,
// before Settle: the meter is kept in out.
func (out *Outcome) Context(ctx context.Context) context.Context {
	if !out.metered {
		return ctx
	}
	if out.meter == nil {
		parent, _ := ctx.Value(meterKey{}).(*meter)
		out.meter = &meter{Context: ctx, parent: parent}
	}
	return out.meter
}

// ReportedCost returns the cost the call's handler reported with
// ReportCost, and whether it reported one.
func (out *Outcome) ReportedCost() (int, bool) {
	if out.meter == nil {
		return 0, false
	}
	v := out.meter.cost.Load()
	return int(v - 1), v > 0
}

// ReportCost reports the real cost of the call whose context ctx is (or
// derives from), for limits that charge the cost known after the
// response (WithCostAfter; grpclimit's and connectlimit's too): the call
// is charged n instead of its estimate when it settles. A later report
// replaces an earlier one; a report after the handler has returned comes
// too late and is not charged. A cost above 2^24 counts as 2^24.
//
// It returns an error wrapping ErrInvalidCost for a negative n, and one
// wrapping ErrInvalidOption when no such limit is in front of the call
// (nothing would charge the cost).
func ReportCost(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: ReportCost(%d) is negative", ErrInvalidCost, n)
	}
	m, _ := ctx.Value(meterKey{}).(*meter)
	if m == nil {
		return fmt.Errorf("%w: ReportCost: no limit in front of this call charges the cost after the response (WithCostAfter)", ErrInvalidOption)
	}
	for ; m != nil; m = m.parent {
		m.cost.Store(int64(min(n, maxLimit)) + 1)
	}
	return nil
}

// canRefund reports whether l gives back units: a Refunder, or a
// Composite all of whose members give back or hold slots.
func canRefund(l Limiter) bool {
	if c, ok := l.(*Composite); ok {
		return c.every(func(m Limiter) bool { return canRefund(m) || holdsSlots(m) })
	}
	_, ok := l.(Refunder)
	return ok
}

// canCharge reports whether l charges beyond its quota: a Charger, or a
// Composite all of whose members charge or hold slots (which are not
// charged).
func canCharge(l Limiter) bool {
	if c, ok := l.(*Composite); ok {
		return c.every(func(m Limiter) bool { return canCharge(m) || holdsSlots(m) })
	}
	if _, ok := l.(Charger); !ok {
		return false
	}
	ch, ok := l.(interface{ Charges() bool })
	return !ok || ch.Charges()
}
