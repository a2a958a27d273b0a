package floodgate

import (
	"context"
	"fmt"
)

// This file holds what a SlidingLog does for the admission kinds beyond a
// rate: charging beyond its limit (Charger), for WithCostAfter.

// ChargeN records n units for key whether or not the window has room for
// them (Charger): the log may count more than Rate.Limit, in debt, and
// every later request is denied, with a RetryAfter that counts the debt,
// until enough units have left the window — which, for a window, is at
// most a Period after the last charge: units older than that never count.
//
// The debt is bounded with no effect on any wait: an entry weighs at most
// Rate.Limit units (a charge of more is recorded as Rate.Limit: a request
// of cost 1 or more must wait for that entry to leave the window either
// way), and a log that already holds Rate.Limit entries is folded into one
// entry at now weighing at most Rate.Limit (its older units then count a
// little longer, never shorter), so a key still holds at most Rate.Limit
// entries and counts at most Rate.Limit² units. n above 2^24 counts as
// 2^24; a negative n is ErrInvalidCost. O(1) amortized, as a decision.
func (l *SlidingLog) ChargeN(_ context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	return l.store.run(key, true, func(a *slAlg, st *slState, now int64) {
		a.expire(st, now)
		a.charge(st, now, uint32(min(n, a.limit)))
	})
}

// maxLogUnits bounds the units a log holds, far below where its 32-bit
// running totals wrap: a log reaching it folds (see charge), which is
// conservative — every unit at now is denied at least as long.
const maxLogUnits = 1 << 31

// charge records w units at now on a log that expire brought up to date,
// beyond the limit if need be (see ChargeN for the bounds).
func (a *slAlg) charge(st *slState, now int64, w uint32) {
	limit := uint32(a.limit)
	w = min(w, limit)
	keep := limit // the most the newest entry weighs
	// A log near the top of its 32-bit running totals folds too: its
	// units would wrap to none. At most limit entries of limit units
	// reach 2^32 at MaxSlidingLogLimit.
	if used := st.used(); int(st.count) >= a.limit || used > limit && st.count == 1 || used > maxLogUnits-w {
		// Fold: every unit at now, no more than limit of them. A log of
		// one entry of more than limit is one restored in debt (see
		// restore), which counts at least the units of the log it was
		// taken from: it folds as that log may have, keeping them all.
		if used > limit && st.count == 1 {
			keep = used
		}
		w = min(used+w, keep)
		st.head, st.count, st.low = 0, 0, 0
	}
	a.record(st, now, w)
	// record merges into a newest entry of the same time unit: an entry
	// weighs at most keep.
	last := st.entry(int(st.count) - 1)
	prev := st.low
	if st.count > 1 {
		prev = st.entry(int(st.count) - 2).total
	}
	if last.total-prev > keep {
		last.total = prev + keep
	}
}

var _ Charger = (*SlidingLog)(nil)
