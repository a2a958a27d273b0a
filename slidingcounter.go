package floodgate

import (
	"context"
	"math/bits"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/estimate"
	"github.com/floodgate-go/floodgate/internal/inherit"
)

// SlidingCounter is an in-memory sliding-window counter: the constant-memory
// approximation of a SlidingLog for large limits (10,000 per hour, say),
// where a log of every event per key would cost too much.
//
// Time is cut into fixed windows of Rate.Period, aligned on the limiter's
// creation. For each key the counter keeps the number of events counted in
// the current fixed window and in the previous one, and estimates the
// number in the sliding window (now-Period, now] by assuming that the
// previous window's events were spread evenly over it:
//
//	estimate = previous × (Period − elapsed)/Period + current
//
// where elapsed is the time since the current fixed window began. AllowN(n)
// counts n events if estimate + n ≤ Rate.Limit; a denied request counts
// nothing. The state of a key is a window index and two 32-bit counts, 16
// bytes whatever the limit and n, so the worst case per key is its only
// case: 34 bytes per tracked key with the store's slot and its share of
// a bucket in a store sized for its keys, up to about 50 in one partly
// full (41 B for 10,000 keys in the default store: BenchmarkBytesPerKey).
// A decision costs O(1) time whatever n.
//
// # Error bound
//
// If the previous window's events were spread evenly, the estimate is the
// exact count. Otherwise, of the previous window's count p, anything from
// none to all may really lie inside the sliding window, so at elapsed e
//
//	−p·e/Period ≤ estimate − exact ≤ p·(Period−e)/Period
//
// and the error is never more than p ≤ Rate.Limit events. Over-estimating
// denies a request that an exact log would allow, for at most a Period.
// Under-estimating lets through more than Rate.Limit events in a
// Period-long window: up to Rate.Limit + p·e/Period, below 2·Rate.Limit,
// in the worst case of a previous window whose events all came at its very
// end. The tests measure both against a SlidingLog on random traffic. Use
// a SlidingLog where the limit must be exact.
//
// Keys live in a bounded, sharded LRU store (WithMaxKeys); a key whose
// estimate has fallen to zero equals a fresh one and is dropped first, at
// no cost. A key dropped while its estimate is not zero leaves its window
// and both counts in a 16-byte debt (unless WithForgetEvicted) and comes
// back from it deciding exactly as if it had never been dropped, for
// every period longer than Limit nanoseconds (every period over 16.8 ms,
// whatever the limit; below, a previous count that does not fit is
// counted in the current window) and every sum of counts below 2^25 (a
// counter whose counts a downgrade left above that comes back charged up
// to a 2^19th more, never less). A debt carried ahead (ChargeN) comes
// back exactly: its state is the debt's last window and two counts.
//
// A SlidingCounter is safe for concurrent use.
type SlidingCounter struct {
	// cur is the rate the counter decides under, for Rate and the cost
	// check before a decision; each shard of the store holds the one its
	// keys are in (see SetRate).
	cur   atomic.Pointer[scAlg]
	store *store[scState, *scAlg]
}

// scAlg is a sliding counter's rate: its parameters and its state
// machine over one key's counts.
type scAlg struct {
	rate   Rate
	limit  int
	period int64 // Rate.Period in ns
	est    estimate.Counter
	// debts bounds a key's debt (WithMaxDebt), owing in this rate's terms.
	debts DebtLimits
	owing debtCap
}

func newSCAlg(r Rate, debts DebtLimits) *scAlg {
	return &scAlg{rate: r, limit: r.Limit, period: int64(r.Period),
		est:   estimate.Counter{Limit: uint32(r.Limit), Period: int64(r.Period)},
		debts: debts, owing: newDebtCap(debts, r, r.Limit)}
}

// scState is one key's counts: cur events in fixed window number window
// (counted from the epoch), prev in the one before it. The zero value
// counts nothing.
type scState struct {
	window    int64
	prev, cur uint32
}

// NewSlidingCounter returns a sliding-window counter allowing about r.Limit
// events per key in any window of r.Period (see the type's error bound).
// It accepts WithMaxDebt, WithMaxKeys, WithMaxKeyLength, WithShards and
// WithClock;
// invalid values, and options that do not apply (such as WithBurst or
// WithCountDenied), are reported as errors wrapping ErrInvalidRate or
// ErrInvalidOption.
func NewSlidingCounter(r Rate, opts ...Option) (*SlidingCounter, error) {
	if err := validateWindowRate(r); err != nil {
		return nil, err
	}
	c, err := newConfig(kindCounter, opts)
	if err != nil {
		return nil, err
	}
	a := newSCAlg(r, c.debt)
	sc := &SlidingCounter{}
	sc.cur.Store(a)
	if sc.store, err = newStore[scState](c, a); err != nil {
		return nil, err
	}
	return sc, nil
}

// Rate returns the rate the counter decides under: the one it was
// created with, or the last one SetRate set.
func (sc *SlidingCounter) Rate() Rate { return sc.cur.Load().rate }

// Allow is AllowN(ctx, key, 1), inlinable as AllowN is.
func (sc *SlidingCounter) Allow(_ context.Context, key string) (d Decision, err error) {
	err = sc.allowN(&d, key, 1)
	return d, err
}

// AllowN counts n events for key if the estimated count in the Period
// ending now leaves room for them, and reports the decision either way;
// n == 0 reports without counting. A cost above Rate.Limit returns
// ErrCostExceedsLimit. The context is not consulted: an in-memory decision
// does not block.
func (sc *SlidingCounter) AllowN(_ context.Context, key string, n int) (d Decision, err error) {
	err = sc.allowN(&d, key, n)
	return d, err
}

// allowN fills the caller's Decision in place: see TokenBucket.AllowN.
func (sc *SlidingCounter) allowN(d *Decision, key string, n int) error {
	limit := sc.cur.Load().limit
	if n < 0 || n > limit {
		if err := sc.above(d, key, n, limit); err != nil {
			return err
		}
	}
	cost := n
	err := sc.store.run(key, n > 0, func(a *scAlg, st *scState, now int64) {
		if n > a.limit {
			n = 0 // the limit shrank under a SetRate still under way: report
		}
		a.decide(d, st, now, n)
	})
	switch {
	case err != nil:
		*d = Decision{Limit: limit}
		return err
	case n != cost:
		*d = Decision{Limit: d.Limit}
		return checkCost(cost, d.Limit)
	}
	return nil
}

// above judges a cost that the published limit refuses, by the limit of
// the rate key decides under, read under its lock: see TokenBucket.above.
// A cost that never fits returns ErrCostExceedsLimit with that Limit.
func (sc *SlidingCounter) above(d *Decision, key string, n, limit int) error {
	if n >= 0 {
		err := sc.store.run(key, false, func(a *scAlg, _ *scState, _ int64) { limit = a.limit })
		if err != nil {
			*d = Decision{Limit: limit}
			return err
		}
	}
	*d = Decision{Limit: limit}
	return checkCost(n, limit)
}

// SetRate makes the counter decide under a new rate from now on,
// converting every key's counts as they stand as c.Inherit says (see
// Inherit). With the period unchanged, the counts stay in their fixed
// windows: ScaleUsed and AddDifference take units from the previous
// window first and add them to the newest count. A new period cuts time
// into new fixed windows (aligned, as before, on the limiter's creation):
// the units the key's estimate counts at the change, rounded up, are
// converted and counted as events of the current new window, which
// counts each event at least as much as the estimate did at the change.
// A key whose count is above the new Limit waits until its events stop
// weighing.
//
// The debts the store remembers for evicted keys are converted with
// them, as the counts each restores to. c is checked as
// NewSlidingCounter checks its rate. See TokenBucket.SetRate for how a
// change proceeds while decisions go on. The context is not consulted.
func (sc *SlidingCounter) SetRate(_ context.Context, c RateChange) error {
	if err := c.checkWindow(); err != nil {
		return err
	}
	a := newSCAlg(c.Rate, sc.cur.Load().debts)
	sc.store.change(a, c.Inherit, func() { sc.cur.Store(a) })
	return nil
}

// RefundN uncounts n events of key, giving back the units of an AllowN
// that was allowed but whose event did not happen (for instance because
// another limit of a combined policy denied it). It takes them from the
// current fixed window and, if that holds fewer, from the previous one,
// where they are if a window boundary passed since the AllowN. A key that
// is not tracked is left alone; a negative n returns ErrInvalidCost, and n
// above both Rate.Limit and the Limit of the rate the key decides under
// (which differ while SetRate converts) ErrCostExceedsLimit.
//
// The counts do not say which events belong to which call: if the AllowN
// was in the previous window but other events came in the current one
// since, the refund takes those instead, which lowers the estimate more
// than exact (the current window's events weigh fully, the previous one's
// by their share) until the current window ends.
func (sc *SlidingCounter) RefundN(_ context.Context, key string, n int) error {
	if limit := sc.cur.Load().limit; n < 0 || n > limit {
		// Judged by the limit the key decides under, read under its
		// lock: while SetRate converts, a key already raised may have
		// been charged more than the published limit (see above).
		if err := sc.above(&Decision{}, key, n, limit); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	return sc.store.refund(key, func(a *scAlg, st *scState, now int64) { a.refund(st, now, uint32(n)) })
}

// refund takes n events off st, from the current window first; from a
// debt carried ahead, from its last window first (see refundAhead).
func (a *scAlg) refund(st *scState, now int64, n uint32) {
	w := now / a.period
	if st.ahead(w) {
		a.refundAhead(st, w, uint64(n))
		return
	}
	prev, cur := st.counts(w)
	take := min(cur, n)
	cur -= take
	prev -= min(prev, n-take)
	st.window, st.prev, st.cur = w, prev, cur
}

// refundAhead takes n events off a debt carried past window w, from its
// last window back: the windows it spans after w hold the limit each but
// the last. What is left is carried again from w, the window before the
// last counting the limit, or st.prev if that window is still the last
// but one. Taking more than the debt brings the key back to window w,
// which then counts the limit less the rest, and its previous window the
// limit, not knowing what it was: the most a window counts (more charged,
// never less, unless a downgrade had left a window above the limit).
func (a *scAlg) refundAhead(st *scState, w int64, n uint64) {
	limit := uint64(a.limit)
	carried := uint64(st.window-w-1)*limit + uint64(st.cur) // the windows after w
	if n < carried {
		left := carried - n
		k := (left + limit - 1) / limit
		win := w + int64(k)
		prev := uint32(limit)
		if win == st.window {
			prev = st.prev
		}
		st.window, st.prev, st.cur = win, prev, uint32(left-(k-1)*limit)
		return
	}
	cur := uint64(st.prev) // window w, when it is the one before the last
	if st.window-w > 1 {
		cur = limit
	}
	st.window, st.prev, st.cur = w, uint32(limit), uint32(cur-min(cur, n-carried))
}

// Wait is WaitN(ctx, key, 1).
func (sc *SlidingCounter) Wait(ctx context.Context, key string) error {
	return WaitN(ctx, sc, key, 1)
}

// WaitN blocks until n events can be recorded for key and records them, or
// returns early: with ErrWouldExceedDeadline when the context's deadline
// comes before the wait would end, with the context's error when it ends,
// and with ErrCostExceedsLimit when n can never fit. See the package-level
// WaitN; waiters are not queued.
func (sc *SlidingCounter) WaitN(ctx context.Context, key string, n int) error {
	return WaitN(ctx, sc, key, n)
}

// Reset forgets key's counts, giving it its full quota back, also when
// the key was evicted and its debt remembered, and for good: it stays
// free until it spends again.
func (sc *SlidingCounter) Reset(_ context.Context, key string) error {
	return sc.store.reset(key)
}

// Stats reports the size of the key store and its evictions.
func (sc *SlidingCounter) Stats() Stats { return sc.store.stats() }

// counts returns the previous and current counts as of fixed window w,
// which is never before st.window: the clock does not go back.
func (st *scState) counts(w int64) (prev, cur uint32) {
	switch st.window {
	case w:
		return st.prev, st.cur
	case w - 1:
		return st.cur, 0
	}
	return 0, 0
}

// decide is the counter's state machine for one key at now. All the
// comparisons are exact: products of a count and a time are taken in 128
// bits, since Rate.Limit × Period overflows int64 for long periods.
func (a *scAlg) decide(d *Decision, st *scState, now int64, n int) {
	w := now / a.period
	if st.ahead(w) {
		a.decideAhead(d, st, now, n)
		return
	}
	start := w * a.period
	elapsed := now - start
	prev, cur := st.counts(w)
	limit := uint32(a.limit)
	*d = Decision{Limit: a.limit}
	// estimate + n <= limit ⇔ cur + n <= limit and
	// prev·(Period − elapsed) <= (limit − cur − n)·Period.
	// A report (n == 0) is allowed even when a downgrade left the counts
	// above the limit (see SetRate).
	if n == 0 || cur+uint32(n) <= limit && !a.est.Above(prev, a.period-elapsed, limit-cur-uint32(n)) {
		d.Allowed = true
		if n > 0 {
			cur += uint32(n)
			st.window, st.prev, st.cur = w, prev, cur
		}
	} else {
		d.RetryAfter = durationNS(a.est.RetryAt(start, prev, cur, uint32(n)) - now)
	}
	d.Remaining = max(a.limit-int(cur)-int(a.est.Share(prev, a.period-elapsed)), 0)
	switch {
	case cur > 0: // the current window's events weigh until the next one ends
		d.ResetAfter = durationNS(start + 2*a.period - now)
	case prev > 0:
		d.ResetAfter = durationNS(start + a.period - now)
	}
}

// decideAhead decides for a key that carries a debt into the windows
// after now's (see ChargeN): every window until st.window counts the
// limit, so only a report is allowed; the wait is for the estimate of
// st.window and the one after it, as their counts say.
func (a *scAlg) decideAhead(d *Decision, st *scState, now int64, n int) {
	start := st.window * a.period
	*d = Decision{Limit: a.limit, Allowed: n == 0}
	if n > 0 {
		d.RetryAfter = durationNS(a.est.RetryAt(start, st.prev, st.cur, uint32(n)) - now)
	}
	end := start + 2*a.period
	if st.cur == 0 {
		end -= a.period
	}
	d.ResetAfter = durationNS(end - now)
}

// debt returns what st owes at now (see debt), exactly: the end of the
// window after which its last events stop weighing, and its counts. The
// counts are taken as of the window of the newer one that is not zero
// (a current window with no events yet is the window after the one its
// previous count was made in, which the state equals from then on), so
// that the debt's end is two periods after that window began, and amt is
// the sum of both counts (see packCount). The previous count rides in
// the time, that many nanoseconds after the end: the end is a multiple
// of Period, and the count, at most Rate.Limit unless charged beyond
// (ChargeN), is below Period for every rate whose period is longer than
// Limit nanoseconds (every period over 16.8 ms, whatever the limit). A
// previous count that does not fit is owed as if its events had come in
// the current window (more charged, never less). The debt so runs out up
// to Rate.Limit nanoseconds after the counts stop weighing, when a key
// restored from it starts from counts that weigh nothing.
func (a *scAlg) debt(st *scState, now int64) debt {
	w := now / a.period
	prev, cur := st.counts(w)
	if st.ahead(w) { // a debt carried ahead: as of its last window
		w, prev, cur = st.window, st.prev, st.cur
	}
	switch {
	case cur > 0:
		v := debt{at: (w + 2) * a.period, amt: packCount(uint64(prev) + uint64(cur))}
		if int64(prev) < a.period {
			v.at += int64(prev)
		}
		return v
	case prev > 0:
		return debt{at: (w + 1) * a.period, amt: packCount(uint64(prev))}
	}
	return debt{}
}

// restore sets st to the counts a key's debt v keeps (see debt): the
// state v was taken from, or one that counts the same events in the same
// windows, so that it decides exactly as that state would. A shared
// bound (v.shared), whose time and amount are the largest of several
// keys', is restored as its amount counted in the window its time ends:
// no previous count, every event of the current window, which weighs at
// least as much as the counts of any of those keys at every time. So is
// a sum of counts rounded up (see packCount): its events beyond the real
// ones count in the current window, more charged, never less.
func (a *scAlg) restore(st *scState, v debt, now int64) {
	*st = scState{}
	if !v.owes(now) {
		return
	}
	w := v.at/a.period - 2
	if now >= (w+2)*a.period {
		return // the previous count's nanoseconds: the counts weigh nothing
	}
	prev := uint32(v.at - (w+2)*a.period)
	if v.shared {
		prev = 0
	}
	st.window, st.prev, st.cur = w, prev, unpackCount(v.amt)-prev
}

// A debt's amount holds a counter's sum of counts in fewer bits than
// the counts take when charged beyond the limit (2^30 each, see
// ChargeN), and below the debt memory's shield (markerAmt): exactly
// below countExact (2^25, twice the largest limit), and above as a
// number of countMantBits significant bits and an exponent, rounded up
// (a relative error below 2^-19), which a restored counter counts in its
// current window: charged for a debt of 2^25 events or more up to a
// 2^19th more, never less. The packing keeps the order of the sums, so
// that the maximum of two amounts (a shared bound, see debt) is the
// amount of the larger.
const (
	countExact    = 1 << 25
	countMantBits = 19
)

// packCount returns the amount that holds a sum of counts n (at most
// 2^31).
func packCount(n uint64) uint32 {
	if n < countExact {
		return uint32(n)
	}
	e := uint(bits.Len64(n)) - (countMantBits + 1)
	m := (n + 1<<e - 1) >> e // the leading bits, rounded up: in [2^19, 2^20]
	if m == 1<<(countMantBits+1) {
		m, e = m>>1, e+1
	}
	return countExact | uint32(e)<<countMantBits | uint32(m)&(1<<countMantBits-1)
}

// unpackCount returns the sum a packed amount holds (see packCount). It
// keeps the order of every amount, not only of those packCount returns:
// the debt memory rounds an amount up to a number it can hold (see
// debts), which may lie between the exact sums and the smallest packed
// one, 2^25 with an exponent of countMinExp; those count as that one.
func unpackCount(a uint32) uint32 {
	if a < countExact {
		return a
	}
	e := a >> countMantBits & (countExact>>countMantBits - 1)
	if e < countMinExp {
		return countExact
	}
	return (1<<countMantBits | a&(1<<countMantBits-1)) << e
}

// countMinExp is the exponent packCount gives the smallest packed sum,
// countExact (2^25, of bit length 26, less countMantBits+1).
const countMinExp = 26 - (countMantBits + 1)

// convert sets st, counts under a at now, to the counts under b that
// inherit what they count as how says (see SlidingCounter.SetRate).
func (a *scAlg) convert(st *scState, b *scAlg, how Inherit, now int64) {
	w := now / a.period
	prev, cur := st.counts(w)
	if st.ahead(w) {
		// A debt carried ahead is converted as of its last window, as on
		// Redis: its windows before that all count the limit.
		w, now, prev, cur = st.window, st.window*a.period, st.prev, st.cur
	}
	*st = scState{}
	if how == StartFresh || prev+cur == 0 {
		return
	}
	if b.period != a.period {
		used := uint64(cur) + uint64(a.est.Share(prev, a.period-(now-w*a.period)))
		if u := how.units(used, uint64(a.limit), uint64(b.limit)); u > 0 {
			st.window, st.cur = now/b.period, uint32(u)
		}
		return
	}
	p, c := inherit.Strategy(how).Counts(uint64(prev), uint64(cur), uint64(a.limit), uint64(b.limit))
	st.window, st.prev, st.cur = w, uint32(p), uint32(c)
}

// Compile-time checks that the sliding counter is a Limiter that can
// be reset and refunded.
var (
	_ Limiter  = (*SlidingCounter)(nil)
	_ Resetter = (*SlidingCounter)(nil)
	_ Refunder = (*SlidingCounter)(nil)
)

// moveTo moves key's counts into to, another sliding counter, converted
// as how says (see PlanLimiter).
func (sc *SlidingCounter) moveTo(to Limiter, key string, how Inherit) (bool, error) {
	t, ok := to.(*SlidingCounter)
	if !ok || !sameClock(&sc.store.clock, &t.store.clock) {
		return false, nil
	}
	st, owes, err := sc.store.take(key, t.store.algOf(key), how)
	if err != nil || !owes {
		return true, err
	}
	return true, t.store.put(key, st)
}

// holds reports whether key's counts weigh on its estimate.
func (sc *SlidingCounter) holds(key string) bool { return sc.store.owes(key) }
