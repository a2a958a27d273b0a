package floodgate

import (
	"context"
	"fmt"
)

// This file holds what a SlidingCounter does for the admission kinds
// beyond a rate: charging beyond its limit (Charger), for WithCostAfter.

// maxCounterDebt bounds the count of a window: 2^30 units, so that the
// two windows' counts, and their sum in the debt memory, stay in 32 bits.
const maxCounterDebt = 1 << 30

// ChargeN counts n events for key whether or not the estimate leaves room
// for them (Charger): the counter may estimate more than Rate.Limit, in
// debt, and every later request is denied, with a RetryAfter that counts
// the debt, until the estimate falls back — within two Periods at most,
// as its window and then the next one end.
//
// A window's count saturates at 2^30 events; n above 2^24 counts as 2^24.
// Saturation shortens nothing but the wait of a debt above 2^30, and by
// less than Rate.Limit/2^30 of a Period (at most 1/64). A negative n is
// ErrInvalidCost. O(1) whatever n.
func (sc *SlidingCounter) ChargeN(_ context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	c := uint32(min(n, maxLimit))
	return sc.store.run(key, true, func(a *scAlg, st *scState, now int64) {
		w := now / a.period
		prev, cur := st.counts(w)
		st.window, st.prev, st.cur = w, prev, max(min(cur+c, maxCounterDebt), cur)
	})
}

var _ Charger = (*SlidingCounter)(nil)
