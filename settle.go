package floodgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Result is what an adapter knows of a call once its handler has returned
// or panicked, for Settle. The zero Result is a call that counts, at the
// cost it was admitted at (or the one its handler reported with
// ReportCost).
type Result struct {
	// Uncounted reports that the call does not count (its HTTP status,
	// or its gRPC code, is not one the adapter's predicate counts):
	// Settle gives its reserved cost back (WithCountStatus,
	// WithRefundUncounted).
	Uncounted bool
	// Panicked reports that the handler panicked. The call counts,
	// whatever Uncounted says: it may have done its work before the
	// panic. Under WithSettledCost it is charged at least its estimate.
	Panicked bool
	// Cost is the call's real cost, if CostKnown, under WithSettledCost:
	// the adapter's reading of the response (bytes sent, a header, a
	// trailer). Otherwise the cost the handler reported with ReportCost
	// applies, and if it reported none, the estimate the call was
	// admitted at stands.
	Cost      int
	CostKnown bool
}

// settleLater marks an allowed call as one the adapter must settle, and
// notes what settling it needs.
func (g *Gate) settleLater(out *Outcome) {
	out.NeedsSettle = true
	out.metered = g.cfg.costAfter
	if out.Call.policy.holds {
		out.start = g.cfg.now().UnixNano()
	}
}

// Settle completes a call after its handler, for an Outcome with
// NeedsSettle (for any other it does nothing). It releases the slots the
// call holds (a Releaser's, such as InFlight's); gives the reserved cost
// back if res says the call does not count; and, under WithSettledCost,
// charges the call's real cost instead of its estimate — the difference
// is given back (Refunder) or charged (Charger), so the key may go into
// debt. A correction is reported to the decision hook as an AfterHandler
// event. What Settle owes is owed even if the client has gone: ctx's
// cancellation is not passed on.
//
// An adapter calls Settle exactly once per call that NeedsSettle, also
// when the handler panics (Result.Panicked) or the client hangs up — the
// natural place for what has to happen at the end of every admitted
// call. A call never settled keeps its slots and its estimate: the safe
// side for the limit, not for the client.
func (g *Gate) Settle(ctx context.Context, out Outcome, res Result) {
	if !out.NeedsSettle {
		return
	}
	c := &out.Call
	if c.policy.holds {
		held := time.Duration(max(g.cfg.now().UnixNano()-out.start, 0))
		if err := c.policy.Limiter.(Releaser).ReleaseN(context.WithoutCancel(ctx), c.Key, c.Cost, held); err != nil { // checked by newPolicy
			g.logError(ctx, &out, err)
		}
	}
	real := g.realCost(&out, res)
	if real == c.Cost {
		return
	}
	ctx = context.WithoutCancel(ctx)
	ev := DecisionEvent{Request: c.Request, Policy: c.policy.Name, Key: c.Key, AfterHandler: true}
	if real < c.Cost {
		ev.Cost = c.Cost - real
		ev.Err = refund(ctx, c.policy, c.Key, ev.Cost)
	} else {
		ev.Charged = real - c.Cost
		ev.Err = charge(ctx, c.policy, c.Key, ev.Charged)
		if ev.DebtCapped, ev.Err = debtCapped(ev.Err); ev.DebtCapped {
			g.logDebtCapped(ctx, &out, ev.Charged)
		}
	}
	if ev.Err != nil {
		g.logError(ctx, &out, ev.Err)
	}
	if g.cfg.hook != nil {
		g.cfg.hook(ev)
	}
}

// realCost is what a settled call costs in the end: nothing if it does
// not count; under WithSettledCost its real cost, as the adapter read it
// or the handler reported it, at least its estimate if the handler
// panicked, and within 0..2^24 like any cost; its estimate otherwise.
func (g *Gate) realCost(out *Outcome, res Result) int {
	est := out.Call.Cost
	if (g.cfg.settle || out.Call.refundable) && res.Uncounted && !res.Panicked {
		return 0
	}
	if !g.cfg.costAfter {
		return est
	}
	real, known := res.Cost, res.CostKnown
	if !known {
		real, known = out.ReportedCost()
	}
	switch {
	case !known:
		return est
	case res.Panicked:
		real = max(real, est)
	}
	return min(max(real, 0), maxLimit)
}

// debtCapped sorts a charge's error: whether the key's debt reached its
// limits (ErrDebtCapped: charged up to them, which is no failure), and
// what failed besides, if anything (a Composite joins its members'
// errors).
func debtCapped(err error) (capped bool, rest error) {
	if !errors.Is(err, ErrDebtCapped) {
		return false, err
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return true, nil
	}
	var others []error
	for _, e := range j.Unwrap() {
		if !errors.Is(e, ErrDebtCapped) {
			others = append(others, e)
		}
	}
	return true, errors.Join(others...)
}

// logDebtCapped logs, once per gate at WARN, that a call's real cost took
// its key to the limit of what it may owe (WithMaxDebt): the rest was
// forgiven. Every such call is in the decision events (DebtCapped), which
// the metrics adapters count; the line says where to look.
func (g *Gate) logDebtCapped(ctx context.Context, out *Outcome, charged int) {
	if g.cfg.logger == nil || !g.debtCapLogged.CompareAndSwap(false, true) {
		return
	}
	policy, method, path := out.where()
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn,
		"a call's real cost took its key to the most it may owe (WithMaxDebt); the excess was forgiven. Logged once: the decision events (DebtCapped) and the metrics count every such call",
		policy, method, path,
		slog.String("key", out.Call.Key),
		slog.Int("charged", charged))
}

// refund gives n units back to key under p's limiter.
func refund(ctx context.Context, p *policy, key string, n int) error {
	if r, ok := p.Limiter.(Refunder); ok { // checked by newGate
		return r.RefundN(ctx, key, n)
	}
	return fmt.Errorf("%w: policy %q cannot refund", ErrInvalidOption, p.Name)
}

// charge takes n more units from key under p's limiter, beyond its quota
// if need be.
func charge(ctx context.Context, p *policy, key string, n int) error {
	if ch, ok := p.Limiter.(Charger); ok { // checked by newGate
		return ch.ChargeN(ctx, key, n)
	}
	return fmt.Errorf("%w: policy %q cannot charge", ErrInvalidOption, p.Name)
}

// checkKinds refuses a policy whose limiter cannot do what the gate's
// options ask of it: charge after the call, or book units ahead.
func checkKinds(c gateConfig, p *policy) error {
	if c.costAfter && !(canRefund(p.Limiter) && canCharge(p.Limiter)) {
		return fmt.Errorf("%w: policy %q: charging the cost known after the response (WithCostAfter, WithSettledCost) needs a limiter that implements Charger and Refunder, to charge or give back the difference from the estimate", ErrInvalidOption, p.Name)
	}
	if c.wait != nil && !canReserve(p.Limiter) {
		return fmt.Errorf("%w: policy %q: waiting for a turn (WithWait) needs a limiter that implements Reserver, to book units ahead (a TokenBucket, or an All of them; put an in-flight limit in a middleware of its own)", ErrInvalidOption, p.Name)
	}
	return nil
}

// WithSettledCost is the transport-neutral half of WithCostAfter, for an
// adapter over a Gate: each call is admitted at its cost (WithCost, the
// adapter's Call.Cost; at least 1), taken as an estimate, and charged its
// real cost when it settles — the cost the adapter reads from the
// response (Result.Cost), or else the one its handler reported with
// ReportCost (the adapter hands the handler Outcome.Context), or else the
// estimate. The difference is given back or charged: a key may go into
// debt, and its later calls wait until it is paid, at the limit's rate
// on every algorithm and never more than the limiter's debt limits
// (WithMaxDebt; a charge they cap is reported in the call's
// DecisionEvent, DebtCapped). Every policy's limiter must implement
// Charger and Refunder. See WithCostAfter for the bound on what
// concurrent calls can over-spend. The net/http middleware does not take
// it: give WithCostAfter, whose cost function reads the response.
func WithSettledCost() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.costAfter = true
		c.given["WithSettledCost"] = true
		return c.once("cost after")
	}
}
