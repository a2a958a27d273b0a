package floodgate

import (
	"context"
	"fmt"
	"math"
)

// This file holds what a SlidingLog does for the admission kinds beyond a
// rate: charging beyond its limit (Charger), for WithCostAfter, with the
// debt carried into the coming windows.

// ChargeN records n units for key whether or not the window has room for
// them (Charger). What the window has room for is recorded at now, as an
// allowed request would be; the rest is a debt carried into the coming
// windows, Rate.Limit units to each: the units beyond the limit are dated
// one Period after the key's newest entry, the next Rate.Limit a Period
// later, and so on, and each counts until its own date plus a Period,
// like any unit. The log then counts them all, so every request is
// denied, with a RetryAfter that says when the debt is paid, until as
// few remain as leave the request room: a key that over-spends by D
// units waits about D/Limit Periods more, as on a token bucket, whatever
// the window, and over any run, however long, the units a key gets in a
// Period average no more than Rate.Limit (plus what the calls in flight
// when its quota ran out over-spent). A request allowed while a debt's
// last window still has room joins that window.
//
// The debt is one entry however many windows it spans (the units and
// the newest real entry they are dated from), so the log still holds at
// most Rate.Limit entries (2 for a Limit of 1), and a charge is O(1),
// amortized: when the debt needs an entry and the log has none left, the
// log's entries are folded into its newest (its older units then count
// a little longer, never shorter). What a key may owe is bounded
// (WithMaxDebt, DefaultDebtLimits): one charge counts at most PerCall's
// worth of units (at least Rate.Limit, at most 2^24) and the debt at
// most Total's (at least one window's, at most 2^30 units); a charge
// that reaches a bound is charged up to it and returns an error wrapping
// ErrDebtCapped. A negative n is ErrInvalidCost.
func (l *SlidingLog) ChargeN(_ context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	capped := false
	err := l.store.run(key, true, func(a *slAlg, st *slState, now int64) {
		a.expire(st, now)
		w := min(uint64(min(n, maxLimit)), a.owing.PerCall)
		capped = a.charge(st, now, uint32(w)) || w < uint64(n)
	})
	if err == nil && capped {
		return fmt.Errorf("%w: ChargeN(%d) on key %q", ErrDebtCapped, n, key)
	}
	return err
}

// maxLogUnits bounds the units a log's real entries hold (a restored
// debt counts that many, see restore), and maxLogDebt the units it
// carries ahead: together far below where its 32-bit running totals
// wrap.
const (
	maxLogUnits = 1 << 31
	maxLogDebt  = 1 << 30
)

// debtOff is the offset of the entry that holds a debt carried ahead: the
// newest entry, whose weight is the debt's units, dated from the entry
// before it, the anchor (see slotAt). No real entry has this offset (see
// record), and it sorts after every real one.
const debtOff = math.MaxUint32

// inDebt reports whether st carries a debt into the coming windows.
func (st *slState) inDebt() bool {
	return st.count >= 2 && st.entry(int(st.count)-1).off == debtOff
}

// debtUnits returns the units st carries ahead (0 if none).
func (st *slState) debtUnits() uint32 {
	if !st.inDebt() {
		return 0
	}
	n := int(st.count)
	return st.entry(n-1).total - st.entry(n-2).total
}

// slotAt returns the date of the j-th window a debt is carried into: j
// Periods after the anchor's, at most maxDebtAhead past it.
func (a *slAlg) slotAt(st *slState, j int) int64 {
	anchor := a.at(st, int(st.count)-2)
	return anchor + min(int64(j), maxDebtAhead/a.period)*a.period
}

// debtMost returns the most units a's log may carry ahead.
func (a *slAlg) debtMost() uint32 {
	return uint32(min(a.owing.Total, maxLogDebt))
}

// charge records w units at now on a log that expire brought up to date,
// beyond the limit if need be (see ChargeN), and reports whether the
// debt's bound stopped it.
func (a *slAlg) charge(st *slState, now int64, w uint32) (capped bool) {
	if !st.inDebt() {
		if used, limit := st.used(), uint32(a.limit); used < limit {
			fill := min(w, limit-used)
			a.record(st, now, fill)
			w -= fill
		}
	}
	if w == 0 {
		return false
	}
	debt, most := st.debtUnits(), a.debtMost()
	if debt >= most {
		return true
	}
	add := min(w, most-debt)
	if debt > 0 {
		st.addDebt(add)
	} else {
		a.appendDebt(st, add)
	}
	return add < w
}

// addDebt adds w units to the debt st carries ahead.
func (st *slState) addDebt(w uint32) {
	st.entry(int(st.count) - 1).total += w
}

// appendDebt starts a debt of w units after st's newest entry, its
// anchor. A log whose ring is full (Rate.Limit entries, at least 2) is
// folded first: its entries become one at its newest entry's time, so
// its units count as long as that entry does — never shorter.
func (a *slAlg) appendDebt(st *slState, w uint32) {
	last := *st.entry(int(st.count) - 1)
	if int(st.count) >= max(a.limit, 2) {
		st.ring[0], st.head, st.count = last, 0, 1
	}
	if int(st.count) == len(st.ring) {
		st.grow(max(a.limit, 2))
	}
	st.count++
	*st.entry(int(st.count) - 1) = slEntry{off: debtOff, total: last.total + w}
}

// settleDebt brings a debt carried ahead up to now: once its anchor has
// aged out, the windows dated before now - Period have aged out too, and
// the one now falls in becomes a real entry, the new anchor. Every real
// entry is as old as the anchor or older, so what remains is that entry
// and the rest of the debt.
func (a *slAlg) settleDebt(st *slState, now int64) {
	anchor := a.at(st, int(st.count)-2)
	if anchor > now-a.period {
		return
	}
	debt, limit := uint64(st.debtUnits()), uint64(a.limit)
	m := uint64((now - anchor) / a.period) // the window dated at or before now, after now - Period
	st.head, st.count, st.low = 0, 0, 0
	slots := (debt + limit - 1) / limit
	if m > slots {
		return // every window has aged out
	}
	gone := (m - 1) * limit // m-1 < slots <= 2^30
	cur := min(debt-gone, limit)
	a.record(st, anchor+int64(m)*a.period, uint32(cur))
	if rest := debt - gone - cur; rest > 0 {
		a.appendDebt(st, uint32(rest))
	}
}

var _ Charger = (*SlidingLog)(nil)
