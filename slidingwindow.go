package floodgate

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// SlidingLog is an in-memory sliding-log limiter: for each key it allows at
// most Rate.Limit events in any window of Rate.Period ending now. It keeps
// the time of every counted event, so an event at t stops counting at
// t+Period (to within a few nanoseconds, never earlier: see NewSlidingLog),
// with no boundary burst and no estimate; use a SlidingCounter when
// Rate.Limit is so large that a log per key costs too much memory.
//
// AllowN(n) records n events when the window has room for all of them. A
// denied request is not recorded unless the limiter was built with
// WithCountDenied, in which case a client's attempts count, not only its
// successes: one that keeps trying Rate.Limit times a Period or more stays
// blocked.
//
// Each key costs about 4 bytes per recorded event, at most Rate.Limit of
// them: event times are 32-bit offsets from a per-key base, in a time unit
// of a few nanoseconds scaled to the period (see NewSlidingLog), kept in a
// ring that grows only as far as the key's traffic needs. Keys live in a
// bounded, sharded LRU store (WithMaxKeys); a log whose events have all aged
// out equals a fresh one and is dropped first, at no cost.
//
// A SlidingLog is safe for concurrent use.
type SlidingLog struct {
	rate        Rate
	limit       int
	period      int64 // Rate.Period in ns
	unit        int64 // ns; event times are kept in this unit
	countDenied bool
	store       *store[slState]
}

// slState is one key's log. The entries are event times in units of
// l.unit ns, stored as offsets from the base era<<eraShift units, in
// chronological order starting at ring[head] and wrapping around.
// len(ring) is the number of entries:
// the ring grows by appending until it holds Rate.Limit of them and only
// then wraps, so head is zero whenever the ring is not full. Entries are
// never removed one by one as they age out: the decision skips them, a new
// event overwrites the oldest once the ring is full, and a log whose
// entries have all aged out is emptied. The zero value is an empty log.
type slState struct {
	ring []uint32
	// era, rather than a 64-bit base, keeps the state at 32 bytes. A
	// 32-bit era count lasts 2⁶² units: at least 146 years of uptime.
	era  uint32
	head uint32
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
// any window of r.Period. It accepts WithCountDenied, WithMaxKeys,
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
	if err := validateWindowRate(r); err != nil {
		return nil, err
	}
	c, err := newConfig(kindSlidingLog, opts)
	if err != nil {
		return nil, err
	}
	l := &SlidingLog{
		rate:        r,
		limit:       r.Limit,
		period:      int64(r.Period),
		unit:        logUnit(int64(r.Period)),
		countDenied: c.countDenied,
	}
	if l.store, err = newStore(c, l.freshAt); err != nil {
		return nil, err
	}
	return l, nil
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
// tries less than Rate.Limit times a Period. Memory stays bounded: the log
// never holds more than Rate.Limit entries per key, a new entry
// overwriting the oldest once it is full. The reported RetryAfter then accounts for the
// denied attempt itself. It applies only to NewSlidingLog.
func WithCountDenied() Option {
	return func(c *config) error {
		c.countDenied = true
		return c.once("WithCountDenied")
	}
}

// Rate returns the rate the log was created with.
func (l *SlidingLog) Rate() Rate { return l.rate }

// Allow is AllowN(ctx, key, 1).
func (l *SlidingLog) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN records n events for key if at most Rate.Limit-n were recorded
// in the Period ending now, and reports the decision either way;
// n == 0 reports without recording. A cost above Rate.Limit returns
// ErrCostExceedsLimit. The context is not consulted: an in-memory decision
// does not block.
func (l *SlidingLog) AllowN(_ context.Context, key string, n int) (Decision, error) {
	if err := checkCost(n, l.limit); err != nil {
		return Decision{Limit: l.limit}, err
	}
	sh, st, now, err := l.store.acquire(key, n > 0)
	if err != nil {
		return Decision{Limit: l.limit}, err
	}
	if st == nil { // n == 0 on an untracked key: an empty log
		sh.mu.Unlock()
		return Decision{Allowed: true, Limit: l.limit, Remaining: l.limit}, nil
	}
	d := l.decide(st, now, n)
	sh.mu.Unlock()
	return d, nil
}

// RefundN removes the n newest entries of key's log, giving back the units
// of an AllowN that was allowed but whose event did not happen (for
// instance because another limit of a combined policy denied it). A log
// holding fewer entries is left empty, an untracked key alone; a negative
// n returns ErrInvalidCost and n above Rate.Limit ErrCostExceedsLimit.
//
// The log does not know which entries belong to which call: if another
// event for the key was recorded between the AllowN and the RefundN, the
// refund removes that newer event's entries and keeps the refunded ones.
// The count in the window is right, but those entries age out earlier than
// the events they stand for, by at most the time between the two calls, so
// for that long the key may get up to n events more than exact.
func (l *SlidingLog) RefundN(_ context.Context, key string, n int) error {
	if err := checkCost(n, l.limit); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	sh, st, _, err := l.store.acquire(key, false)
	if err != nil {
		return err
	}
	if st != nil {
		st.linearize()
		st.ring = st.ring[:max(len(st.ring)-n, 0)]
	}
	sh.mu.Unlock()
	return nil
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

// Reset forgets key's log, giving it its full quota back.
func (l *SlidingLog) Reset(_ context.Context, key string) error {
	return l.store.remove(key)
}

// Stats reports the size of the key store and its evictions.
func (l *SlidingLog) Stats() Stats { return l.store.stats() }

// decide is the sliding log's state machine for one key at now.
func (l *SlidingLog) decide(st *slState, now int64, n int) Decision {
	live := len(st.ring) - l.firstLive(st, now)
	d := Decision{Limit: l.limit}
	switch {
	case live+n <= l.limit:
		d.Allowed = true
		if n > 0 {
			l.record(st, now, n, live)
			live += n
		}
	case l.countDenied:
		l.record(st, now, n, live)
		// The new entries overwrote the oldest, which had aged out first.
		live = min(live+n, l.limit)
	}
	d.Remaining = l.limit - live
	if live > 0 {
		d.ResetAfter = durationNS(l.at(st, len(st.ring)-1) + l.period - now)
	}
	if !d.Allowed {
		// n fits once live+n-limit of the live entries have aged out; the
		// last of them is the (live+n-limit)-th oldest live entry.
		first := len(st.ring) - live
		d.RetryAfter = durationNS(l.at(st, first+live+n-l.limit-1) + l.period - now)
	}
	return d
}

// at returns the time, in ns since the epoch, of the i-th oldest entry.
func (l *SlidingLog) at(st *slState, i int) int64 {
	j := int(st.head) + i
	if j >= len(st.ring) {
		j -= len(st.ring)
	}
	return (st.base() + int64(st.ring[j])) * l.unit
}

// firstLive returns the index (oldest first) of the first entry still in
// the window ending at now, len(st.ring) if none is. An entry at t counts
// while t > now-Period; the entries are in order, so the ones that aged
// out come first and a binary search finds the boundary.
func (l *SlidingLog) firstLive(st *slState, now int64) int {
	cutoff := now - l.period
	n := len(st.ring)
	if n == 0 || l.at(st, n-1) <= cutoff {
		return n
	}
	if l.at(st, 0) > cutoff {
		return 0
	}
	lo, hi := 0, n-1 // the answer is in [lo, hi]: entry hi is live
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if l.at(st, mid) > cutoff {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// record appends k entries at now to a log with live entries in the
// window, overwriting the oldest once the ring holds Rate.Limit entries.
func (l *SlidingLog) record(st *slState, now int64, k, live int) {
	// Round up to the unit: the event then counts a little longer than
	// exact, never shorter.
	u := (now + l.unit - 1) / l.unit
	switch {
	case live == 0:
		// Every entry has aged out: start over, keeping the memory.
		st.ring, st.head, st.era = st.ring[:0], 0, uint32(u>>eraShift)
	case u-st.base() > math.MaxUint32:
		l.rebase(st, now)
	}
	off := uint32(u - st.base())
	if need := min(len(st.ring)+k, l.limit); need > cap(st.ring) {
		// Grow lazily, doubling but never past Rate.Limit: a key that saw
		// a few events does not pay for a full log.
		ring := make([]uint32, len(st.ring), min(max(need, 2*cap(st.ring)), l.limit))
		copy(ring, st.ring)
		st.ring = ring
	}
	for ; k > 0 && len(st.ring) < l.limit; k-- {
		st.ring = append(st.ring, off)
	}
	for ; k > 0; k-- {
		st.ring[st.head] = off
		if st.head++; int(st.head) == len(st.ring) {
			st.head = 0
		}
	}
}

// rebase moves the log's base up to the last era boundary at or before
// the start of the window ending at now, so that the offset of an event at
// now fits in 32 bits again: it is then at most a period, an era (2³⁰
// units) and a unit, less than 2³² units since a period is at most 2³¹.
// Entries at or below the new base, which have aged out, are clamped to
// it, so order is kept. The next rebase is at least 2³⁰ units (half a
// period, and at least a second) away, and happens only if the log stays
// busy: a log that goes quiet for a period is emptied instead.
func (l *SlidingLog) rebase(st *slState, now int64) {
	era := uint32((now - l.period) / l.unit >> eraShift)
	base, old := int64(era)<<eraShift, st.base()
	for i, off := range st.ring {
		if e := old + int64(off); e > base {
			st.ring[i] = uint32(e - base)
		} else {
			st.ring[i] = 0
		}
	}
	st.era = era
}

// linearize rotates a wrapped ring so that the oldest entry is first,
// which lets RefundN shorten it while keeping head zero for a ring that is
// not full. It works in place: reversing both parts and then the whole
// rotates left by head.
func (st *slState) linearize() {
	if st.head == 0 {
		return
	}
	slices.Reverse(st.ring[:st.head])
	slices.Reverse(st.ring[st.head:])
	slices.Reverse(st.ring)
	st.head = 0
}

// freshAt is when the newest entry ages out and the log equals an empty
// one.
func (l *SlidingLog) freshAt(st *slState) int64 {
	if len(st.ring) == 0 {
		return math.MinInt64
	}
	return l.at(st, len(st.ring)-1) + l.period
}

// Compile-time checks that the sliding log is a Limiter that can be reset and
// refunded.
var (
	_ Limiter  = (*SlidingLog)(nil)
	_ Resetter = (*SlidingLog)(nil)
	_ Refunder = (*SlidingLog)(nil)
)
