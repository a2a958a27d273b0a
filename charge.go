package floodgate

import "context"

// Charger is implemented by limiters that can charge a key beyond its
// quota: Bucket4j's overdraft. The admission core uses it to charge a
// call's real cost once it is known, after the response
// (WithCostAfter): the key may end up owing more than its quota holds —
// in debt — and later calls are then denied, with a RetryAfter that says
// when the debt is paid, until it is.
//
// Every limiter pays a debt at its rate: a token bucket's refill pays it,
// and a window limiter carries what its window has no room for into the
// coming windows, Rate.Limit to each, so that over any run the units a
// key gets per Period average the limit plus what its calls in flight
// over-spent when its quota ran out — never the excess again every
// window. A debt is bounded (WithMaxDebt, DefaultDebtLimits: what one
// charge adds and what a key owes, as the time its refill takes to pay
// it, never below the quota): a charge beyond the bound is charged up to
// it and returns an error wrapping ErrDebtCapped, and nothing wraps. A
// single charge counts at most 2^24 units, the largest cost. ChargeN does
// O(1) work whatever n (amortized for a log).
//
// A limiter whose type implements Charger but that cannot charge in its
// configuration (a redisstore limiter with leased quota) also has a
// method Charges() bool that reports false; WithCostAfter refuses it at
// construction.
type Charger interface {
	// ChargeN takes n units from key whether or not its quota holds
	// them. n above 2^24 (the largest cost) is charged as 2^24, and n
	// beyond the key's debt limits up to them, with an error wrapping
	// ErrDebtCapped; a negative n is ErrInvalidCost.
	ChargeN(ctx context.Context, key string, n int) error
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
