package floodgate

import (
	"context"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/inherit"
)

// SlidingLog is an in-memory sliding-log limiter: for each key it allows at
// most Rate.Limit events in any window of Rate.Period ending now. It keeps
// the time of every counted decision, so an event at t stops counting at
// t+Period (to within a few nanoseconds, never earlier: see NewSlidingLog),
// with no boundary burst and no estimate.
//
// AllowN(n) records one entry, the decision's time and its weight n, when
// the window has room for all n units. A denied request is not recorded
// unless the limiter was built with WithCountDenied, in which case a
// client's attempts count, not only its successes: one that keeps trying
// Rate.Limit times a Period or more stays blocked.
//
// # Cost
//
// A decision takes O(log k) time for the k entries of its key, and adds
// one entry at most, whatever n: its weight is a count, not n entries. An
// entry is 8 bytes (a 32-bit time offset from a per-key base, in a time
// unit of a few nanoseconds scaled to the period, and a 32-bit running
// total of the weights), held in a ring that grows by doubling only as far
// as the key's traffic needs. A key's live entries weigh at least one unit
// each and at most Rate.Limit together, so the ring never holds more than
// Rate.Limit of them. A key costs about 115 bytes with one decision held
// (the store's 48-byte slot and its share of a bucket, and a ring of
// two); the worst case, a key that spends its quota one unit at a time
// at distinct instants, adds 8·Rate.Limit bytes rounded up to the
// allocator's size class (at most an eighth more): 998 B per key at Limit
// 100, 8,394 B at Limit 1,000 (BenchmarkBytesPerKey), 512 KiB at MaxSlidingLogLimit,
// the largest limit accepted. Where that times the keys tracked is too
// much, use a SlidingCounter (constant memory) or a TokenBucket.
//
// Keys live in a bounded, sharded LRU store (WithMaxKeys); a log whose
// entries have all aged out equals a fresh one and is dropped first, at no
// cost. A key dropped while its log still counts leaves a 16-byte debt
// (unless WithForgetEvicted), which cannot hold every entry: the key
// comes back with the units it counted at two times at most, those up to
// one older entry (the step) at that entry's time rounded up to a grid,
// the others at its newest entry's time. No unit is put earlier than it
// came, so a restored key is never allowed what it would have been
// denied; and none later than the newest entry, so it counts units longer
// than the exact log would only until its newest entry ages out, a Period
// after its newest request at most, and never counts more units than its
// log did. The grid is about Period/2²⁰ at Limit 5, Period/2¹⁸ at 10,
// Period/4,096 at 100, Period/256 at 1,000 and Period/32 at
// MaxSlidingLogLimit. The step's units are exact up to Limit 256, so that
// a log of two entries comes back as it was, but that its older entry
// ages out up to a grid step late; above, they are rounded down to a
// 256th of the log's units (down to a 16th at MaxSlidingLogLimit), the
// rest counting at the newest entry's time. Of a longer log, the step is
// the entry that gives back the most units times the time they gain
// (before rounding), among every entry of a log of up to nine, and eight
// spread evenly over the entries of a longer one. A key evicted again
// after it came back may have units moved later again, never past its
// newest entry of the time. A log that carries a debt into the coming
// windows (ChargeN) comes back denied until the debt's last window ends:
// the limit in every window up to it (more charged than it may have
// been, never less). Past the debt memory's size, a key bound by a debt
// shared with others comes back denied until up to a Period after the
// latest of them ends.
//
// A SlidingLog is safe for concurrent use.
type SlidingLog struct {
	// cur is the rate the log decides under, for Rate and the cost check
	// before a decision; each shard of the store holds the one its keys
	// are in (see SetRate).
	cur   atomic.Pointer[slAlg]
	store *store[slState, *slAlg]
}

// slAlg is a sliding log's rate: its parameters and its state machine
// over one key's log.
type slAlg struct {
	rate        Rate
	limit       int
	period      int64 // Rate.Period in ns
	unit        int64 // ns; event times are kept in this unit
	step        logStep
	countDenied bool
	// debts bounds a key's debt (WithMaxDebt), owing in this rate's terms.
	debts DebtLimits
	owing debtCap
}

// MaxSlidingLogLimit is the largest Rate.Limit a sliding log accepts, in
// memory and on Redis. A log holds up to Rate.Limit entries per key, so
// the bound keeps the worst case of one key at 512 KiB in memory.
const MaxSlidingLogLimit = 1 << 16

// slState is one key's log: count entries in chronological order starting
// at ring[head] and wrapping around; len(ring) is the capacity. Entries
// that age out are dropped from the front by moving head, a decision adds
// at most one at the back, and a log whose entries have all aged out is
// emptied, keeping its memory. The zero value is an empty log.
//
// Weights are kept as running totals modulo 2³²: entry i has weighed
// ring[i].total − low units since the oldest unit still counted, where low
// is the total just before that unit. Differences are exact because a log
// never counts more than Rate.Limit units (at most 2¹⁶) at once. With
// totals, the weight of the live entries is one subtraction and the wait
// for a denied request a binary search, however many entries there are.
type slState struct {
	ring []slEntry
	// era, rather than a 64-bit base, keeps the state at 40 bytes. A
	// 32-bit era count lasts 2⁶² units: at least 146 years of uptime.
	era   uint32
	head  uint32
	count uint32
	low   uint32
}

// slEntry is one decision: its time, in units after the log's base, and
// the running total of the weights up to and including it.
type slEntry struct {
	off   uint32
	total uint32
}

// eraShift makes the base of a log a multiple of 2³⁰ units: a base at most
// 2³⁰ units below any time chosen for it still leaves room for two periods
// of offsets above it.
const eraShift = 30

func (st *slState) base() int64 { return int64(st.era) << eraShift }

// maxWindowPeriod bounds Rate.Period for the window limiters (about 73
// years) so that an event time plus a period or two always fits in int64.
const maxWindowPeriod = 1 << 61

// NewSlidingLog returns a sliding log allowing r.Limit events per key in
// any window of r.Period; r.Limit may be at most MaxSlidingLogLimit. It
// accepts WithCountDenied, WithMaxDebt, WithMaxKeys,
// WithMaxKeyLength, WithShards and WithClock; invalid values, and options
// that do not apply (such as WithBurst), are reported as errors wrapping
// ErrInvalidRate or ErrInvalidOption.
//
// Event times are rounded up to the log's time unit: the smallest of 1, 2,
// 5, 10, 20, 50, ... ns for which 2³² units span at least two periods (1 ns
// for periods up to about 2 s, 50 ns for a minute, 2 µs for an hour).
// Rounding up means an event stops counting up to one unit after t+Period,
// never before, so the limit is never looser than exact; the RetryAfter and
// ResetAfter it reports are exact for the times it stores. Such a unit
// divides a millisecond for periods up to 24.8 days, so events on a
// millisecond grid are kept exactly.
func NewSlidingLog(r Rate, opts ...Option) (*SlidingLog, error) {
	if err := checkSlidingLogRate(r); err != nil {
		return nil, err
	}
	c, err := newConfig(kindSlidingLog, opts)
	if err != nil {
		return nil, err
	}
	a := newSLAlg(r, c.countDenied, c.debt)
	l := &SlidingLog{}
	l.cur.Store(a)
	// A log's debts are kept exactly (see slAlg.debt), in two words each:
	// its debt memory has twice the words, for as many debts.
	c.debtsPerKey *= 2
	if l.store, err = newStore[slState](c, a); err != nil {
		return nil, err
	}
	return l, nil
}

func newSLAlg(r Rate, countDenied bool, debts DebtLimits) *slAlg {
	a := &slAlg{rate: r, limit: r.Limit, period: int64(r.Period), unit: logUnit(int64(r.Period)), countDenied: countDenied,
		debts: debts, owing: newDebtCap(debts, r, r.Limit)}
	a.step = newLogStep(r.Limit, a.period, a.unit)
	return a
}

// checkSlidingLogRate is validateWindowRate plus the bound on a log's
// entries.
func checkSlidingLogRate(r Rate) error {
	if err := validateWindowRate(r); err != nil {
		return err
	}
	if r.Limit > MaxSlidingLogLimit {
		return fmt.Errorf("%w: a sliding log keeps up to Limit entries per key, and %d is above MaxSlidingLogLimit %d; "+
			"use a SlidingCounter (constant memory per key) or a TokenBucket for larger limits",
			ErrInvalidRate, r.Limit, MaxSlidingLogLimit)
	}
	return nil
}

// validateWindowRate is Rate.Validate plus the period bound of the window
// limiters.
func validateWindowRate(r Rate) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Period > maxWindowPeriod {
		return fmt.Errorf("%w: period %s is above the supported maximum %s",
			ErrInvalidRate, r.Period, time.Duration(maxWindowPeriod))
	}
	return nil
}

// logUnit returns the smallest unit of the 1-2-5 series such that 2³²
// units cover two periods. Two periods, not one, leave room above a log's
// base for a period of entries plus the slack that lets it rebase rarely
// (see rebase). A power of two would save a multiplication, but a decimal
// unit keeps times that people and tests choose (whole milliseconds,
// seconds) exact.
func logUnit(period int64) int64 {
	need := (2*uint64(period) + 1<<32 - 1) >> 32 // ceil(2·period / 2³²)
	for unit := int64(1); ; unit *= 10 {
		for _, m := range [...]int64{1, 2, 5} {
			if uint64(m*unit) >= need {
				return m * unit
			}
		}
	}
}

// WithCountDenied makes a sliding log record denied attempts too, each
// with its cost, so that a client that keeps trying stays blocked until it
// tries less than Rate.Limit times a Period. A denied attempt of cost n is
// recorded as an entry of weight n, and the oldest units the log counts
// are dropped until it counts Rate.Limit again: the log counts the newest
// Rate.Limit units of attempts, so its memory stays bounded by Rate.Limit
// entries per key. The reported RetryAfter then accounts for the denied
// attempt itself. It applies only to NewSlidingLog.
func WithCountDenied() Option {
	return func(c *config) error {
		c.countDenied = true
		return c.once("WithCountDenied")
	}
}

// Rate returns the rate the log decides under: the one it was created
// with, or the last one SetRate set.
func (l *SlidingLog) Rate() Rate { return l.cur.Load().rate }

// Allow is AllowN(ctx, key, 1), inlinable as AllowN is.
func (l *SlidingLog) Allow(_ context.Context, key string) (d Decision, err error) {
	err = l.allowN(&d, key, 1)
	return d, err
}

// AllowN records n events for key if at most Rate.Limit-n were recorded
// in the Period ending now, and reports the decision either way;
// n == 0 reports without recording. A cost above Rate.Limit returns
// ErrCostExceedsLimit. The context is not consulted: an in-memory decision
// does not block.
func (l *SlidingLog) AllowN(_ context.Context, key string, n int) (d Decision, err error) {
	err = l.allowN(&d, key, n)
	return d, err
}

// allowN fills the caller's Decision in place: see TokenBucket.AllowN.
func (l *SlidingLog) allowN(d *Decision, key string, n int) error {
	limit := l.cur.Load().limit
	if n < 0 || n > limit {
		if err := l.above(d, key, n, limit); err != nil {
			return err
		}
	}
	cost := n
	err := l.store.run(key, n > 0, func(a *slAlg, st *slState, now int64) {
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
func (l *SlidingLog) above(d *Decision, key string, n, limit int) error {
	if n >= 0 {
		err := l.store.run(key, false, func(a *slAlg, _ *slState, _ int64) { limit = a.limit })
		if err != nil {
			*d = Decision{Limit: limit}
			return err
		}
	}
	*d = Decision{Limit: limit}
	return checkCost(n, limit)
}

// SetRate makes the log decide under a new rate from now on, converting
// every key's log as it stands as c.Inherit says (see Inherit): under the
// default, KeepUsed, each log keeps its events with their times, and an
// event at t counts until t plus the new Period, if it still counted at
// the change (an event that had aged out under the old period does not
// come back under a longer one). ScaleUsed and AddDifference drop units
// from the oldest events, or add them to the newest, so that no event
// counts for less, or for less long, than exact scaling would have it;
// the newest event gains at least what a log counting any number of
// units from its own to the whole would (ScaleUsed caps a log above the
// old Limit at max(used, new Limit)), taken back from the oldest if the
// log gains less, so that a log that counts at least as long as another
// still does after the change, which the debts of evicted keys rely on.
// A log within the old Limit converts as its count alone says. Times are
// kept in the new period's unit (see NewSlidingLog), rounded up. A key
// whose log counts more than the new Limit keeps those units until they
// age out (its memory still bounded by the largest Limit it had).
//
// A key that carries a debt into the coming windows (ChargeN) keeps
// every unit of it under ScaleUsed and AddDifference too (its debt
// gaining as if its last window's units were the newest event). Under a
// new Limit or Period its log's real units fold into one entry at the
// change's instant (or at its newest entry, if that is later), the
// debt's anchor from then on, so that its windows are dated from the
// change, not from the log's past: a debt's units are re-cut into
// windows of the new rate, and cut from an older anchor, a debt that
// counted more would end sooner than one that counted less (issue 33:
// a key restored from a bounded store's remembered debt, more charged
// than its exact log but dated from an earlier anchor, was let through
// a request of 10 the exact log refused, 11 s before its end, after an
// upgrade under KeepUsed). That costs a key in debt up to a Period more
// of waiting, never less. Under a new period the debt is then filled so
// that it ends no sooner than it did (more charged, never less).
//
// The debts the store remembers for evicted keys are converted with
// them, as the log each restores to. c is checked as NewSlidingLog checks
// its rate; WithCountDenied stays. See TokenBucket.SetRate for how a
// change proceeds while decisions go on. The context is not consulted.
func (l *SlidingLog) SetRate(_ context.Context, c RateChange) error {
	if err := c.checkWindow(); err != nil {
		return err
	}
	if err := checkSlidingLogRate(c.Rate); err != nil {
		return err
	}
	old := l.cur.Load()
	a := newSLAlg(c.Rate, old.countDenied, old.debts)
	l.store.change(a, c.Inherit, func() { l.cur.Store(a) })
	return nil
}

// RefundN takes the n newest units off key's log, giving back the units of
// an AllowN that was allowed but whose event did not happen (for instance
// because another limit of a combined policy denied it). A log counting
// fewer is left empty, an untracked key alone; a negative n returns
// ErrInvalidCost, and n above both Rate.Limit and the Limit of the rate
// the key decides under (which differ while SetRate converts)
// ErrCostExceedsLimit. It drops the
// entries it empties, each one added by an earlier decision, so its cost
// is that of those decisions, not of n.
//
// The log does not know which entries belong to which call: if another
// event for the key was recorded between the AllowN and the RefundN, the
// refund takes that newer event's units and keeps the refunded ones.
// The count in the window is right, but those units age out earlier than
// the events they stand for, by at most the time between the two calls, so
// for that long the key may get up to n events more than exact.
func (l *SlidingLog) RefundN(_ context.Context, key string, n int) error {
	if limit := l.cur.Load().limit; n < 0 || n > limit {
		// Judged by the limit the key decides under, read under its
		// lock: while SetRate converts, a key already raised may have
		// been charged more than the published limit (see above).
		if err := l.above(&Decision{}, key, n, limit); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	return l.store.refund(key, func(_ *slAlg, st *slState, _ int64) { st.takeNewest(uint32(n)) })
}

// Wait is WaitN(ctx, key, 1).
func (l *SlidingLog) Wait(ctx context.Context, key string) error {
	return WaitN(ctx, l, key, 1)
}

// WaitN blocks until n events can be recorded for key and records them, or
// returns early: with ErrWouldExceedDeadline when the context's deadline
// comes before the wait would end, with the context's error when it ends,
// and with ErrCostExceedsLimit when n can never fit. See the package-level
// WaitN; waiters are not queued.
func (l *SlidingLog) WaitN(ctx context.Context, key string, n int) error {
	return WaitN(ctx, l, key, n)
}

// Reset forgets key's log, giving it its full quota back, also when the
// key was evicted and its debt remembered, and for good: it stays free
// until it spends again.
func (l *SlidingLog) Reset(_ context.Context, key string) error {
	return l.store.reset(key)
}

// Stats reports the size of the key store and its evictions.
func (l *SlidingLog) Stats() Stats { return l.store.stats() }

// decide is the sliding log's state machine for one key at now.
func (a *slAlg) decide(d *Decision, st *slState, now int64, n int) {
	a.expire(st, now)
	used := int(st.used())
	*d = Decision{Limit: a.limit}
	switch {
	case n == 0 || used+n <= a.limit: // a report is allowed even above the limit (see SetRate)
		d.Allowed = true
		switch {
		case n > 0 && st.inDebt():
			// A debt carried into the coming windows still has room in
			// its first: the units join it (see ChargeN).
			st.addDebt(uint32(n))
			used += n
		case n > 0:
			a.record(st, now, uint32(n))
			used += n
		}
	case !a.countDenied || n == 0:
	case used > a.limit || st.inDebt():
		// In debt (ChargeN, or a downgrade, see SetRate): the attempt
		// counts as a charge would, and nothing older is dropped.
		a.charge(st, now, uint32(min(n, a.limit)))
		used = int(st.used())
	default:
		// Drop the oldest units so that, with the attempt, the log counts
		// Rate.Limit: the newest Rate.Limit units of attempts count.
		st.takeOldest(uint32(used + n - a.limit))
		a.record(st, now, uint32(n))
		used = a.limit
	}
	d.Remaining = max(a.limit-used, 0) // below 0 in debt (ChargeN, a downgrade)
	if st.count > 0 {
		d.ResetAfter = durationNS(a.end(st) - now)
	}
	if !d.Allowed {
		// n fits once used+n-limit units have aged out: when the unit
		// with which the log counts that many does.
		d.RetryAfter = durationNS(a.expiry(st, used+n-a.limit) - now)
	}
}

// end returns when the newest unit the log counts ages out: its newest
// entry, or a debt's last window.
func (a *slAlg) end(st *slState) int64 {
	if st.inDebt() {
		return a.slotAt(st, (int(st.debtUnits())+a.limit-1)/a.limit) + a.period
	}
	return a.at(st, int(st.count)-1) + a.period
}

// expiry returns when the need-th oldest unit the log counts ages out
// (need in 1..used()): the expiry of the first entry whose running total
// reaches it, or, for a unit of a debt carried ahead, of its window.
func (a *slAlg) expiry(st *slState, need int) int64 {
	i := st.firstReaching(uint32(need))
	if st.entry(i).off != debtOff {
		return a.at(st, i) + a.period
	}
	before := int(st.entry(i-1).total - st.low)
	return a.slotAt(st, (need-before+a.limit-1)/a.limit) + a.period
}

// entry returns the i-th oldest entry.
func (st *slState) entry(i int) *slEntry {
	j := int(st.head) + i
	if j >= len(st.ring) {
		j -= len(st.ring)
	}
	return &st.ring[j]
}

// at returns the time, in ns since the epoch, of the i-th oldest entry.
func (a *slAlg) at(st *slState, i int) int64 {
	return (st.base() + int64(st.entry(i).off)) * a.unit
}

// used returns the units the log counts.
func (st *slState) used() uint32 {
	if st.count == 0 {
		return 0
	}
	return st.entry(int(st.count)-1).total - st.low
}

// expire drops the entries that are no longer in the window ending at now:
// an entry at t counts while t > now-Period. The entries are in order, so
// the ones that aged out come first and a binary search finds the boundary.
func (a *slAlg) expire(st *slState, now int64) {
	if st.inDebt() {
		a.settleDebt(st, now)
	}
	cutoff := now - a.period
	n := int(st.count)
	if n == 0 || a.at(st, n-1) <= cutoff {
		// Every entry has aged out: start over, keeping the memory.
		st.head, st.count, st.low = 0, 0, 0
		return
	}
	if a.at(st, 0) > cutoff {
		return
	}
	lo, hi := 1, n-1 // the first live entry is in [lo, hi]: entry 0 is not live, entry hi is
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if a.at(st, mid) > cutoff {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	st.drop(lo)
}

// drop removes the k oldest entries.
func (st *slState) drop(k int) {
	if k == 0 {
		return
	}
	st.low = st.entry(k - 1).total
	st.head = uint32((int(st.head) + k) % len(st.ring))
	st.count -= uint32(k)
}

// firstReaching returns the index of the oldest entry with which the
// entries up to it weigh at least need units; need is at most used().
func (st *slState) firstReaching(need uint32) int {
	lo, hi := 0, int(st.count)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if st.entry(mid).total-st.low >= need {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// takeOldest stops counting the k oldest units (k at most used()),
// dropping the entries they empty.
func (st *slState) takeOldest(k uint32) {
	low := st.low + k
	i := 0
	// An entry is emptied when its total is at or below the new low; the
	// difference is within ±2·MaxSlidingLogLimit, so its sign is exact.
	for i < int(st.count) && int32(st.entry(i).total-low) <= 0 {
		i++
	}
	st.drop(i)
	st.low = low
}

// takeNewest removes the k newest units, dropping the entries they empty.
func (st *slState) takeNewest(k uint32) {
	for k > 0 && st.count > 0 {
		last := st.entry(int(st.count) - 1)
		prev := st.low
		if st.count > 1 {
			prev = st.entry(int(st.count) - 2).total
		}
		w := last.total - prev
		if w > k {
			last.total -= k
			return
		}
		k -= w
		st.count--
	}
	if st.count == 0 {
		st.head, st.low = 0, 0
	}
}

// record appends an entry of weight w at now, or adds w to the newest
// entry if that is at the same time unit.
func (a *slAlg) record(st *slState, now int64, w uint32) {
	// Round up to the unit: the event then counts a little longer than
	// exact, never shorter.
	u := (now + a.unit - 1) / a.unit
	switch {
	case st.count == 0:
		st.head, st.low, st.era = 0, 0, uint32(u>>eraShift)
	case u-st.base() >= debtOff: // a real entry's offset is below debtOff
		a.rebase(st, now)
	}
	off := uint32(u - st.base())
	total := st.low
	if st.count > 0 {
		last := st.entry(int(st.count) - 1)
		if last.off == off {
			last.total += w
			return
		}
		total = last.total
	}
	if int(st.count) == len(st.ring) {
		st.grow(max(a.limit, int(st.count)+1))
	}
	st.count++
	*st.entry(int(st.count) - 1) = slEntry{off: off, total: total + w}
}

// grow doubles the ring, never past limit entries (the Limit, or more
// for a log that counts more after a downgrade): a key that made a few
// decisions does not pay for a full log. The entries are copied oldest
// first, so head becomes zero.
func (st *slState) grow(limit int) {
	ring := make([]slEntry, min(max(2*len(st.ring), 2), limit))
	for i := range int(st.count) {
		ring[i] = *st.entry(i)
	}
	st.ring, st.head = ring, 0
}

// rebase moves the log's base up to the last era boundary at or before
// the start of the window ending at now, so that the offset of an event at
// now fits in 32 bits again: it is then at most a period, an era (2³⁰
// units) and a unit, less than 2³² units since a period is at most 2³¹.
// Every entry is live (expire ran first), so above the new base. The next
// rebase is at least 2³⁰ units (half a period, and at least a second)
// away, and happens only if the log stays busy: a log that goes quiet for
// a period is emptied instead. Its cost, one pass over at most Rate.Limit
// entries, is spread over those 2³⁰ units.
func (a *slAlg) rebase(st *slState, now int64) {
	era := uint32((now - a.period) / a.unit >> eraShift)
	base, old := int64(era)<<eraShift, st.base()
	for i := range int(st.count) {
		if e := st.entry(i); e.off != debtOff {
			e.off = uint32(max(old+int64(e.off)-base, 0))
		}
	}
	st.era = era
}

// debt returns what st owes at now (see debt): when its newest entry
// ages out, and in amt the units it counts above a step (see logStep)
// that lets the units up to one older entry age out sooner (see
// restore). A log charged beyond its limit (ChargeN) counts more units
// than amt holds: its amount says which of the two kinds it is (see
// logStep.over and logStep.ahead), with no step; one that carries a debt
// ahead ends when its last window does, and its amount says how many
// windows its debt spans, which dates its anchor.
func (a *slAlg) debt(st *slState, now int64) debt {
	a.expire(st, now)
	if st.count == 0 {
		return debt{}
	}
	// Every debt of a log is kept exactly (keep): restored, a debt the
	// memory rounded up would date the log's units after entries made
	// later, which its conversions under a change of rate do not take
	// (issue 33: rounded log debts met KeepUsed and forgave, seed
	// 12093151878822871369 of TestBoundedStoreNeverForgivesAcrossRateChanges).
	if st.inDebt() {
		k := (int64(st.debtUnits()) + int64(a.limit) - 1) / int64(a.limit)
		return debt{at: a.end(st), amt: a.step.ahead(k), keep: true}
	}
	// The newest entry is the last, but for one restored from a debt the
	// memory rounded up, which may be dated after entries made later
	// (see restore): the debt ends when the latest entry ages out.
	at := a.at(st, int(st.count)-1)
	for i := range int(st.count) - 1 {
		at = max(at, a.at(st, i))
	}
	at += a.period
	used := st.used()
	if used > uint32(a.limit) {
		return debt{at: at, amt: a.step.over(), keep: true}
	}
	return debt{at: at, amt: used<<a.step.shift | a.bestStep(st, used), keep: true}
}

// restore sets st, keeping its ring, to a log that owes v at now: the
// units the log v was taken from counted, in at most two entries. The
// step's units (see logStep) are at the step's time, the others at the
// time of that log's newest entry, which ages out at v.at. Each unit is
// at its own time or later, so this log counts at every time at least
// the units that log did, and after any same decisions and refunds
// still does. A shared bound (v.shared), the largest time and units of
// several keys', has all its units at its newest time: at least as late,
// and as many, as any of those keys' own. A log over its limit (the
// saturated amount) comes back as the most units any log counts
// (maxLogUnits, 2^31) at its newest time: denied every request until that
// entry ages out, as the log it was taken from was at most. Not the
// Rate.Limit² that ChargeN alone reaches: a downgrade under KeepUsed (see
// SetRate) leaves a log counting units of its older, larger limit, and a
// later upgrade must find them all. A debt carried ahead comes back as
// restoreAhead says, a bound of debts that may carry one ahead as
// restoreBound says.
//
// The amount says whether a log was over its limit or carried a debt
// ahead, and over how many windows, never how far ahead its newest time
// is: a change of rate re-dates a log's entries in the new period's time
// unit, rounded up once more (see reunit), so a log over its limit after
// a downgrade may hold an entry more than a time unit after now.
func (a *slAlg) restore(st *slState, v debt, now int64) {
	st.head, st.count, st.low = 0, 0, 0
	if !v.owes(now) {
		return
	}
	if v.amt > a.step.saturated() {
		if k, exact := a.step.windows(v.amt); exact && !v.shared {
			a.restoreAhead(st, v, k, now)
		} else {
			a.restoreBound(st, v, now)
		}
		return
	}
	newest := (v.at - a.period) / a.unit // an entry's time: a whole number of units
	used := v.amt >> a.step.shift
	var early uint32
	var back int64
	switch {
	case v.amt >= a.step.saturated():
		used = maxLogUnits
	case !v.shared:
		early, back = a.step.decode(v.amt, used)
	}
	st.era = uint32((newest - back) >> eraShift)
	if want := 1 + min(early, 1); len(st.ring) < int(want) {
		st.ring = make([]slEntry, want)
	}
	if early > 0 {
		st.ring[0] = slEntry{off: uint32(newest - back - st.base()), total: early}
		st.count++
	}
	*st.entry(int(st.count)) = slEntry{off: uint32(newest - st.base()), total: used}
	st.count++
}

// restoreAhead sets st to the log that carried a debt ahead (see ChargeN)
// over k windows until v.at, as of now: its anchor k+1 Periods before
// v.at, where the log's own was, holding the most units a log counts
// (maxLogUnits, whatever limit comes next), and Rate.Limit units in each
// of its k windows, brought up to now as the log's own would be (see
// settleDebt). Its anchor is the log's, however far after now a change of
// rate dated it, and it counts at every time at least the units the log
// did (that log, too, was full in each window but its last), so that
// after the same decisions, refunds and changes of rate (see SetRate) it
// still does: it is never let through sooner. The price is a lockout: a
// key restored before its anchor ages out is refused until it does.
func (a *slAlg) restoreAhead(st *slState, v debt, k, now int64) {
	anchor := v.at - (min(k, maxDebtAhead/a.period)+1)*a.period
	a.restoreDebt(st, anchor, k, now)
}

// restoreBound sets st to a log that binds every log whose debt v, a
// bound shared by several keys or a debt whose windows the amount cannot
// count, may stand for (see debt): an anchor at now holding the most
// units a log counts, and a debt of Rate.Limit units a window over as
// many windows from it as any debt v binds may still have to come (from
// an anchor within the Period ending now), no more than the windows its
// amount says, and at least enough to last until v.at. A key's exact log
// dates nothing after now (but for a time unit's rounding), so a log
// over its limit that v binds ends within a Period, as the anchor does;
// a debt carried ahead that v binds is anchored no later and owes no
// more units, so that a change of rate, which anchors each debt at the
// change (see SetRate), leaves it ending no sooner. One state cannot end
// where each of them does: it ends less than a Period after v.at, the
// price of a debt shared past the memory's size. Anchored at v.at's last
// window instead, to bind logs over their limit until v.at, a key merged
// into shared bounds again and again added its debt's windows to its end
// each time (years, in TestBoundedStoreNeverForgivesAcrossRateChanges).
func (a *slAlg) restoreBound(st *slState, v debt, now int64) {
	at := (now + a.unit - 1) / a.unit * a.unit
	windows := (v.at-at+a.period-1)/a.period - 1 // at + (windows+1)·Period ≥ v.at
	if k, exact := a.step.windows(v.amt); exact {
		windows = min(windows, k)
	}
	a.restoreDebt(st, at, windows, now)
}

// restoreDebt sets st to an anchor at the time at (ns) holding
// maxLogUnits and, if windows is positive, a debt of Rate.Limit units in
// each of that many windows after it, brought up to now.
func (a *slAlg) restoreDebt(st *slState, at, windows, now int64) {
	u := (at + a.unit - 1) / a.unit
	st.era = uint32(u >> eraShift)
	if len(st.ring) < 2 {
		st.ring = make([]slEntry, 2)
	}
	st.ring[0], st.head, st.count, st.low = slEntry{off: uint32(u - st.base()), total: maxLogUnits}, 0, 1, 0
	if windows <= 0 {
		return
	}
	a.appendDebt(st, uint32(min(uint64(windows)*uint64(a.limit), maxLogDebt)))
	a.settleDebt(st, now)
}

// logStep is how a sliding log's debt keeps, below the units its log
// counts, a step: some of those units and how much older than the log's
// newest entry they are, which lets them age out sooner than the newest
// entry when the key is restored. The units are kept exactly when the
// log counts at most 2^cbits, and otherwise as a share of the log's
// (units·2^cbits/used, rounded down); the age as a whole number of grid
// time units, rounded down: a restored step holds no more units than came
// at or before its time, which is no earlier than theirs. The bits are
// shared by a limit's needs: the units take bits.Len(Limit+1) of the 26
// bits of a debt's amount (so a shield's amount stays out of reach), the
// step's units up to bits.Len(Limit-1) of the rest and at most half, and
// its age what remains: for Limit 5, the units 3 bits, the step's 3 and
// the age 20 (Period/2²⁰); for Limit 100, 7 bits each and the age 12
// (Period/4,096); for Limit 1,000, 10, 8 and 8; for MaxSlidingLogLimit,
// 17, 4 and 5.
type logStep struct {
	shift uint  // amt's bits below the units
	cbits uint  // the step's units' bits, above the age's
	grid  int64 // time units per step of the age
}

func newLogStep(limit int, period, unit int64) logStep {
	shift := amtBits - uint(bits.Len(uint(limit)+1))
	cbits := min(uint(bits.Len(uint(limit-1))), shift/2)
	longest := (period + unit - 1) / unit // the largest age of a live entry, in units
	grid := longest>>(shift-cbits) + 1    // longest/grid < 2^(shift-cbits)
	return logStep{shift: shift, cbits: cbits, grid: grid}
}

// saturated returns the smallest amount of a log whose units its debt
// does not hold: the units' largest value, which no log within its limit
// reaches (Limit+1 < 2^bits), with no step. A log over its limit (over)
// or carrying a debt ahead (ahead) has such an amount.
func (s logStep) saturated() uint32 {
	return (1<<(amtBits-s.shift) - 1) << s.shift
}

// over returns the amount of a log that counts more than Rate.Limit
// units without a debt ahead (a downgrade, see SetRate): the saturated
// amount, which restore reads as such however far after now its time
// lies (see restore).
func (s logStep) over() uint32 { return s.saturated() }

// ahead returns the amount of a log that carries a debt ahead (ChargeN)
// over k windows (k at least 1): saturated plus k, up to aheadMost, below
// a shield's amount. Above the saturated amount, a bound shared with a
// log over its limit is restored as one that may carry a debt ahead (see
// restoreBound), and the larger of two is the one of more windows.
func (s logStep) ahead(k int64) uint32 {
	return s.saturated() + uint32(min(max(k, 1), s.aheadMost()))
}

// aheadMost returns the windows of the largest ahead amount, which says
// "that many or more": 2^shift − 2 (at least 510, at MaxSlidingLogLimit).
func (s logStep) aheadMost() int64 { return 1<<s.shift - 2 }

// windows returns the windows the ahead amount amt says a debt spans,
// and whether that is exact (not aheadMost, which says at least).
func (s logStep) windows(amt uint32) (k int64, exact bool) {
	k = int64(amt - s.saturated())
	return k, k < s.aheadMost()
}

// encode returns the step for early of used units at most back time
// units older than the newest entry; 0 if it would give back nothing.
func (s logStep) encode(early, used uint32, back int64) uint32 {
	n := early // exact: early < used ≤ 2^cbits
	if used > 1<<s.cbits {
		n = uint32(uint64(early) << s.cbits / uint64(used)) // < 2^cbits: early < used
	}
	age := uint32(back / s.grid)
	if n == 0 || age == 0 { // decode would give back nothing
		return 0
	}
	return n<<(s.shift-s.cbits) | age
}

// decode returns the units and age of the step in amt, for a log of used
// units. A share is rounded up, which keeps the units at or below those
// encoded (share·used/2^cbits ≤ early).
func (s logStep) decode(amt, used uint32) (early uint32, back int64) {
	dbits := s.shift - s.cbits
	early = amt >> dbits & (1<<s.cbits - 1)
	if used > 1<<s.cbits {
		early = uint32((uint64(early)*uint64(used) + 1<<s.cbits - 1) >> s.cbits)
	}
	back = int64(amt&(1<<dbits-1)) * s.grid
	if early == 0 || back == 0 {
		return 0, 0
	}
	return early, back
}

// stepCandidates bounds the entries bestStep weighs, so that a debt costs
// the same whatever the log holds.
const stepCandidates = 8

// bestStep returns the step (see logStep) that gives back the most: of
// the entries before the newest, the one for which the units up to it,
// times how much older than the newest it is, is largest (before the
// step rounds them). It weighs every entry of a log of up to
// stepCandidates+1 entries, and stepCandidates spread evenly over the
// entries of a longer one: a multiplication each, and one step encoded.
func (a *slAlg) bestStep(st *slState, used uint32) uint32 {
	last := int(st.count) - 1
	newest := int64(st.entry(last).off)
	var early uint32
	var back int64
	var most uint64
	for j := range min(last, stepCandidates) {
		i := j
		if last > stepCandidates {
			i = j * last / stepCandidates
		}
		e := st.entry(i)
		n, age := e.total-st.low, newest-int64(e.off)
		if age <= 0 {
			continue // dated no earlier than the newest (see debt): no step
		}
		if gain := uint64(n) * uint64(age); gain > most {
			early, back, most = n, age, gain
		}
	}
	if most == 0 {
		return 0
	}
	return a.step.encode(early, used, back)
}

// convert sets st, a log under a at now, to the log under b that inherits
// what it counts as how says (see algorithm.convert and SlidingLog.SetRate).
func (a *slAlg) convert(st *slState, b *slAlg, how Inherit, now int64) {
	a.expire(st, now)
	if how == StartFresh || st.count == 0 {
		st.head, st.count, st.low = 0, 0, 0
		return
	}
	if st.inDebt() && (b.limit != a.limit || b.period != a.period) {
		// Anchored at the change (see SetRate): a log that counts more
		// than another at every time still does after the debt is re-cut
		// into windows of b, whatever the phase of their anchors was.
		end := a.end(st)
		a.reanchor(st, b, now)
		a.convertUnits(st, b, how)
		if b.period != a.period {
			b.keepEnd(st, end)
		}
		return
	}
	if b.period < a.period {
		// Events that age out under the new period are gone at once.
		a.expireBefore(st, now-b.period)
		if st.count == 0 {
			st.head, st.low = 0, 0
			return
		}
	}
	if b.unit != a.unit {
		a.reunit(st, b)
	}
	a.convertUnits(st, b, how)
}

// reanchor folds the real entries of st, a log carrying a debt ahead,
// into one at now (or at its latest entry, if that is later: a log
// restored from a shared debt may hold one dated after now), in b's time
// unit rounded up, and anchors the debt there. Every unit is then dated
// no earlier than it was: more charged, never less.
func (a *slAlg) reanchor(st *slState, b *slAlg, now int64) {
	n := int(st.count)
	t := now
	for i := range n - 1 {
		t = max(t, a.at(st, i))
	}
	kept := st.entry(n-2).total - st.low
	debt := st.debtUnits()
	u := (t + b.unit - 1) / b.unit
	st.era = uint32(u >> eraShift)
	if len(st.ring) < 2 {
		st.ring = make([]slEntry, 2)
	}
	st.ring[0] = slEntry{off: uint32(u - st.base()), total: kept}
	st.ring[1] = slEntry{off: debtOff, total: kept + debt}
	st.head, st.count, st.low = 0, 2, 0
}

// convertUnits sets how many units st counts under b, and which, as
// how says: units dropped are the oldest; units added go to the newest
// entry, at least what any count from that entry's units to the log's
// would gain (inherit.Strategy.Gain), taken back from the oldest if the
// log itself gains less. That keeps the order a bounded store needs (see
// inherit.Strategy.Counts): a log whose every unit counts as long as
// one of another's converts to one that still does. A log restored from
// a debt counts at least as long as the log it stands for, but may count
// more units, of which ScaleUsed adds fewer: raised from 2/s to 10/s, a
// log of 2 units at 0 s and 2 owed for 1 s gained 6 while the restored
// one, its anchor counting the most units a log counts, gained none, and
// the key had 8 left at 1.1 s instead of 2. A log that counts no
// more than the old Limit converts as its count alone says. A debt
// carried ahead keeps every unit (more charged, never less) and gains
// with its last window's units as the newest.
func (a *slAlg) convertUnits(st *slState, b *slAlg, how Inherit) {
	used := st.used()
	c, c2 := uint64(a.limit), uint64(b.limit)
	u := uint32(how.units(uint64(used), c, c2))
	switch {
	case u < used && st.inDebt():
		// A log that carries a debt ahead keeps every unit: its oldest
		// hold its anchor's place (more charged, never less).
	case u < used:
		st.takeOldest(used - u)
	case st.inDebt():
		d := uint64(st.debtUnits())
		last := d - (d-1)/c*c // its last window's units
		st.addDebt(uint32(inherit.Strategy(how).Gain(uint64(used), last, c, c2)))
	default:
		newest := st.entry(int(st.count) - 1)
		prev := st.low
		if st.count > 1 {
			prev = st.entry(int(st.count) - 2).total
		}
		cur := newest.total - prev
		older, keep := inherit.Strategy(how).Counts(uint64(used-cur), uint64(cur), c, c2)
		newest.total += uint32(keep) - cur
		if take := used - cur - uint32(older); take > 0 {
			// Not for none: a restored log's newest may count
			// maxLogUnits, beyond what takeOldest's sign test reads.
			st.takeOldest(take)
		}
	}
}

// keepEnd makes a debt carried ahead, now cut into windows of b's
// period from its anchor, last until end at least, the time it ended
// under the period it was charged in: it then fills every window of b
// up to end, if that is more. Its units' dates are whole windows after
// the anchor, so a new period would move them, earlier for a shorter
// one: re-cut into full windows they are never dated earlier, and the
// key is never let through sooner than before the change.
func (b *slAlg) keepEnd(st *slState, end int64) {
	anchor := b.at(st, int(st.count)-2)
	windows := max((end-b.period-anchor+b.period-1)/b.period, 1)
	if full := min(uint64(windows)*uint64(b.limit), maxLogDebt); uint64(st.debtUnits()) < full {
		st.addDebt(uint32(full) - st.debtUnits())
	}
}

// expireBefore drops the entries at or before cutoff (ns).
func (a *slAlg) expireBefore(st *slState, cutoff int64) {
	last := int(st.count)
	if st.inDebt() {
		last -= 2 // a debt carried ahead keeps its anchor (see settleDebt)
	}
	i := 0
	for i < last && a.at(st, i) <= cutoff {
		i++
	}
	st.drop(i)
}

// reunit re-expresses st's entries, all within a period of b's ending
// now, in b's time unit, rounded up, from a new base: the oldest entry's
// era.
func (a *slAlg) reunit(st *slState, b *slAlg) {
	first := (a.at(st, 0) + b.unit - 1) / b.unit
	era := uint32(first >> eraShift)
	base := int64(era) << eraShift
	for i := range int(st.count) {
		if e := st.entry(i); e.off != debtOff {
			e.off = uint32((a.at(st, i)+b.unit-1)/b.unit - base)
		}
	}
	st.era = era
}

// Compile-time checks that the sliding log is a Limiter that can be reset and
// refunded.
var (
	_ Limiter  = (*SlidingLog)(nil)
	_ Resetter = (*SlidingLog)(nil)
	_ Refunder = (*SlidingLog)(nil)
)

// moveTo moves key's log into to, another sliding log, converted as how
// says (see PlanLimiter).
func (l *SlidingLog) moveTo(to Limiter, key string, how Inherit) (bool, error) {
	t, ok := to.(*SlidingLog)
	if !ok || !sameClock(&l.store.clock, &t.store.clock) {
		return false, nil
	}
	st, owes, err := l.store.take(key, t.store.algOf(key), how)
	if err != nil || !owes {
		return true, err
	}
	return true, t.store.put(key, st)
}

// holds reports whether key's log counts anything.
func (l *SlidingLog) holds(key string) bool { return l.store.owes(key) }
