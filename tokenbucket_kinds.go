package floodgate

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/internal/debtcap"
)

// This file holds what a TokenBucket does for the admission kinds beyond
// a rate: booking tokens ahead (Reserver), for WithWait, and charging
// beyond the quota (Charger), for WithCostAfter.

// ReserveN takes n tokens from key's bucket if they are there within
// maxWait: at once if the bucket holds them (Wait 0), otherwise booked
// ahead — the theoretical arrival time moves on by n tokens' worth, as
// for an allowed call, and Wait is the time at which those tokens come,
// exactly the RetryAfter AllowN would have reported. A later booking
// waits behind this one, so waiting callers are served in order; RefundN
// gives a booking back. A turn further than maxWait is denied as by
// AllowN, taking nothing. maxWait is capped at 2^61 ns. A cost above the
// burst of the rate key decides under (its own, also while SetRate
// converts the store) returns ErrCostExceedsLimit, as AllowN does.
//
// Interval refill books the same way: the tokens of the periods to come,
// Rate.Limit at each boundary.
func (b *TokenBucket) ReserveN(_ context.Context, key string, n int, maxWait time.Duration) (r Reservation, err error) {
	burst := b.cur.Load().burst
	if n <= 0 || maxWait <= 0 {
		err = b.allowN(&r.Decision, key, n) // nothing to book, or an error
		return r, err
	}
	if n > burst {
		if err = b.above(&r.Decision, key, n, burst); err != nil {
			return r, err // it can never fit the rate key decides under
		}
	}
	wait, over := int64(min(maxWait, maxReserveWait)), false
	err = b.store.run(key, true, func(a *tbAlg, st *tbState, now int64) {
		switch {
		case n > a.burst: // the burst shrank under a SetRate still under way
			a.decide(&r.Decision, st, now, 0)
			r.Allowed, over = false, true
		case a.interval:
			a.reserveInterval(&r, st, now, n, wait)
		default:
			a.reserveGreedy(&r, st, now, n, wait)
		}
	})
	switch {
	case err != nil:
		r = Reservation{Decision: Decision{Limit: burst}}
	case over: // refused as AllowN refuses it: the error, no RetryAfter
		err = checkCost(n, r.Limit)
	}
	return r, err
}

// reserveGreedy decides as decideGreedy, and books a denied call whose
// turn comes within maxWait ns.
func (a *tbAlg) reserveGreedy(r *Reservation, st *tbState, now int64, n int, maxWait int64) {
	a.decideGreedy(&r.Decision, st, now, n)
	if r.Allowed || int64(r.RetryAfter) > maxWait {
		return
	}
	tat, frac := st.tat, st.frac
	if tat < now {
		tat, frac = now, 0
	}
	st.tat, st.frac = a.advance(tat, frac, n)
	owed := st.tat - now
	if st.frac > 0 {
		owed++
	}
	r.Wait = r.RetryAfter
	r.Decision = Decision{Allowed: true, Limit: a.burst, ResetAfter: durationNS(owed)}
}

// reserveInterval decides as decideInterval, and books a denied call
// whose turn comes within maxWait ns: its tokens are counted as used now,
// beyond the burst, and come back with the periods to come.
func (a *tbAlg) reserveInterval(r *Reservation, st *tbState, now int64, n int, maxWait int64) {
	a.decideInterval(&r.Decision, st, now, n)
	if r.Allowed || int64(r.RetryAfter) > maxWait {
		return
	}
	if st.frac == blocked { // full at tat: the booking's turn, and then blocked for its tokens
		turn := st.tat
		a.chargeInterval(st, now, n)
		r.Wait = durationNS(turn - now)
		r.Decision = Decision{Allowed: true, Limit: a.burst, ResetAfter: durationNS(st.tat - now)}
		return
	}
	start, used := a.intervalAt(st, now)
	used += int64(n)
	st.tat, st.frac = start, used
	limit := int64(a.limit)
	r.Wait = r.RetryAfter
	r.Decision = Decision{Allowed: true, Limit: a.burst,
		ResetAfter: durationNS(start + (used+limit-1)/limit*int64(a.period) - now)}
}

var _ Reserver = (*TokenBucket)(nil)

// maxDebtAhead bounds how far a charge moves a bucket's state past now:
// 2^62 ns, about 146 years of refill. A debt saturates there rather than
// wrap; every sum of times stays inside int64.
const maxDebtAhead = int64(1) << 62

// ChargeN takes n tokens from key's bucket whether or not it holds them
// (Charger): the bucket may go below empty, into debt, and every later
// call is denied until the refill has paid it, with a RetryAfter that
// counts it. Interval refill counts the tokens as used, to come back with
// the periods to come. O(1) whatever n.
//
// What a key can owe is bounded (WithMaxDebt, DefaultDebtLimits): one
// charge counts at most PerCall's refill (at least the burst) and at most
// 2^24 tokens, and the bucket owes at most Total's refill beyond empty
// (at least the burst's, and at most 2^62 ns, about 146 years). A charge
// that reaches a bound is charged up to it and returns an error wrapping
// ErrDebtCapped; the debt never wraps.
func (b *TokenBucket) ChargeN(_ context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	capped := false
	err := b.store.run(key, true, func(a *tbAlg, st *tbState, now int64) {
		m := int(min(uint64(min(n, maxLimit)), a.owing.PerCall))
		if a.interval {
			capped = a.chargeInterval(st, now, m)
		} else {
			capped = a.chargeGreedy(st, now, m)
		}
		capped = capped || m < n
	})
	if err == nil && capped {
		return fmt.Errorf("%w: ChargeN(%d) on key %q", ErrDebtCapped, n, key)
	}
	return err
}

// debtAhead returns how far past now a charge may move the bucket's
// state: the burst's refill plus Total's (at least the burst's again),
// rounded up to the microsecond as on Redis, at most maxDebtAhead.
func (a *tbAlg) debtAhead() int64 {
	return debtcap.BucketAhead(a.tauQ, a.debts.Total, maxDebtAhead)
}

// chargeGreedy moves the theoretical arrival time on by n·Period/Limit,
// to now + debtAhead at the latest, and reports whether it stopped there.
func (a *tbAlg) chargeGreedy(st *tbState, now int64, n int) (capped bool) {
	tat, frac := st.tat, st.frac
	if tat < now {
		tat, frac = now, 0
	}
	limit := now + a.debtAhead()
	hi, lo := bits.Mul64(uint64(n), a.period)
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	hi += carry
	if tat >= limit || hi >= a.limit {
		st.tat, st.frac = max(tat, limit), 0 // saturated
		return true
	}
	q, r := bits.Div64(hi, lo, a.limit)
	if q >= uint64(limit-tat) {
		st.tat, st.frac = limit, 0
		return q > uint64(limit-tat) || r > 0
	}
	st.tat, st.frac = tat+int64(q), int64(r)
	return false
}

// chargeInterval counts n more tokens used in the current period, up to
// the burst plus Total's refill, and reports whether it stopped there. A
// blocked bucket (a debt shared with other keys, restored: it allows
// nothing until tat and is full from then on) stays blocked for as many
// periods more as return n tokens: no sooner than the exact state would
// give them back, and to now + debtAhead at the latest.
func (a *tbAlg) chargeInterval(st *tbState, now int64, n int) (capped bool) {
	limit, period := int64(a.limit), int64(a.period)
	if st.frac == blocked && now < st.tat {
		periods := (int64(n) + limit - 1) / limit
		room := max(now+a.debtAhead()-st.tat, 0) / period
		st.tat += min(periods, room) * period
		return periods > room
	}
	if st.frac == blocked {
		*st = tbState{}
	}
	start, used := a.intervalAt(st, now)
	most := int64(a.burst) + int64(min(a.owing.Total, 1<<61)) // tokens
	if periods := maxDebtAhead / period; periods < maxDebtAhead/limit {
		most = min(most, periods*limit)
	}
	st.tat, st.frac = start, min(used+int64(n), max(most, used))
	return used+int64(n) > most
}

var _ Charger = (*TokenBucket)(nil)
