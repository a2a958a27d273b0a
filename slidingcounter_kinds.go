package floodgate

import (
	"context"
	"fmt"
)

// This file holds what a SlidingCounter does for the admission kinds
// beyond a rate: charging beyond its limit (Charger), for WithCostAfter,
// with the overflow carried into the coming windows.

// ChargeN counts n events for key whether or not the estimate leaves room
// for them (Charger). The current fixed window counts what it has room
// for, up to Rate.Limit; the rest is carried into the windows after it,
// Rate.Limit to each, as if those events had come then: every request is
// denied until the last of them, and then as the estimate of that window
// and the next says, with a RetryAfter that counts it all. A key that
// over-spends by D events waits about D/Limit Periods more, as on a
// token bucket, and over any run, however long, the events a key gets in
// a Period average no more than Rate.Limit (plus what the calls in
// flight when its quota ran out over-spent), where a count that only
// saturated in its own window let such a key spend the whole excess again
// every window.
//
// The state stays a window and two counts: while a debt is carried it
// names the debt's last window, its count, and the window before, which
// is full. What a key may owe is bounded (WithMaxDebt, DefaultDebtLimits):
// one charge counts at most PerCall's worth of events (at least
// Rate.Limit, at most 2^24), and a debt reaches Total's worth of windows
// ahead at most (at least one); a charge that reaches a bound is counted
// up to it and returns an error wrapping ErrDebtCapped. A negative n is
// ErrInvalidCost. O(1) whatever n.
func (sc *SlidingCounter) ChargeN(_ context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	capped := false
	err := sc.store.run(key, true, func(a *scAlg, st *scState, now int64) {
		c := min(uint64(min(n, maxLimit)), a.owing.PerCall)
		capped = a.charge(st, now, c) || c < uint64(n)
	})
	if err == nil && capped {
		return fmt.Errorf("%w: ChargeN(%d) on key %q", ErrDebtCapped, n, key)
	}
	return err
}

// maxCounterDebt bounds a window's count: 2^30, so that the two windows'
// counts, and their sum in the debt memory, stay in 32 bits. A counter
// counts no more than its limit in a window (2^24) but after a downgrade
// (see SetRate).
const maxCounterDebt = 1 << 30

// ahead reports whether st carries a debt into windows after w, the
// current one (see ChargeN).
func (st *scState) ahead(w int64) bool { return st.window > w }

// charge counts c events at now beyond the limit if need be (see
// ChargeN), and reports whether the debt's bound stopped it.
func (a *scAlg) charge(st *scState, now int64, c uint64) (capped bool) {
	w := now / a.period
	limit := uint64(a.limit)
	win, prev, cur := st.window, uint64(st.prev), uint64(st.cur)
	if !st.ahead(w) {
		p, q := st.counts(w)
		win, prev, cur = w, uint64(p), uint64(q)
	}
	total := cur + c
	if total <= max(limit, cur) {
		st.window, st.prev, st.cur = win, uint32(prev), uint32(min(total, maxCounterDebt))
		return false
	}
	// The window counts up to the limit (or what it held, after a
	// downgrade), the rest fills the windows after it.
	full := max(limit, cur)
	over := total - full
	k := (over + limit - 1) / limit                 // windows more, at least one
	most := uint64(w+a.owing.Periods) - uint64(win) // windows ahead the bound leaves
	if win >= w+a.owing.Periods {
		most = 0
	}
	rem := over - (k-1)*limit // in 1..limit
	if k > most {
		k, rem, capped = most, limit, true
	}
	switch k {
	case 0:
		st.window, st.prev, st.cur = win, uint32(prev), uint32(full)
	case 1:
		st.window, st.prev, st.cur = win+1, uint32(full), uint32(rem)
	default:
		st.window, st.prev, st.cur = win+int64(k), uint32(limit), uint32(rem)
	}
	return capped
}

var _ Charger = (*SlidingCounter)(nil)
