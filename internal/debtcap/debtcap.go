// Package debtcap holds the arithmetic of floodgate's debt limits
// (floodgate.DebtLimits), shared by the in-memory limiters and redisstore
// so that a limit means the same units and times on both stores.
package debtcap

import (
	"math/bits"
	"time"
)

// Cap is a limiter's debt limits in its rate's terms.
type Cap struct {
	// PerCall is the most units one charge counts.
	PerCall uint64
	// Total is the most units a key may owe beyond its quota.
	Total uint64
	// Periods is Total in whole periods, at least one: how far ahead a
	// window limiter carries a debt.
	Periods int64
}

// New returns the limits perCall and total at limit per period, each at
// least floor units (the quota the limit promises: a bucket's burst, a
// window's Limit).
func New(perCall, total time.Duration, limit int, period time.Duration, floor int) Cap {
	return Cap{
		PerCall: max(UnitsIn(perCall, limit, period), uint64(floor)),
		Total:   max(UnitsIn(total, limit, period), uint64(floor)),
		Periods: max(int64(total/period), 1),
	}
}

// UnitsIn returns the units limit per period refills in d, rounded
// down, saturating at 2^62.
func UnitsIn(d time.Duration, limit int, period time.Duration) uint64 {
	hi, lo := bits.Mul64(uint64(d), uint64(limit))
	if hi >= uint64(period) {
		return 1 << 62
	}
	q, _ := bits.Div64(hi, lo, uint64(period))
	return min(q, 1<<62)
}

// BucketAhead returns how far past now a charge may move a token
// bucket's state, in ns: its burst's refill tau plus total's (at least
// tau again), rounded up to the microsecond (Redis's resolution), at
// most most.
func BucketAhead(tau int64, total time.Duration, most int64) int64 {
	ahead := tau + max(int64(total), tau)
	ahead = (ahead + 999) / 1000 * 1000
	return min(ahead, most)
}
