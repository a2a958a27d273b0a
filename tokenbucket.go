package floodgate

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/inherit"
)

// TokenBucket is an in-memory token-bucket limiter with one bucket per key.
//
// Each bucket holds up to burst tokens (WithBurst, default Rate.Limit) and
// starts full. An event of cost n takes n tokens if the bucket has them; a
// denied event takes nothing. Tokens come back continuously ("greedy"
// refill), Rate.Limit per Rate.Period, exactly as golang.org/x/time/rate
// does for a single limiter; WithIntervalRefill makes them come back all at
// once at the end of each period instead.
//
// The state of a bucket is its theoretical arrival time (GCRA): the time
// at which it will be full again, kept exactly as nanoseconds plus a
// fraction of Rate.Limit, so no rounding accumulates however the period
// divides. Buckets live in a bounded, sharded LRU store (WithMaxKeys); a
// full bucket is indistinguishable from a forgotten one, so idle keys cost
// nothing to drop. A bucket dropped while not full comes back exactly as
// it left, from the store's debt memory (unless WithForgetEvicted; see
// WithDebtMemory for what happens past that memory's size).
//
// A decision costs O(1) time whatever n, and a key the same memory whatever
// its rate and traffic, so its worst case is its only case: 16 bytes of
// state, 34 bytes per tracked key with the store's slot and its share of
// a bucket in a store sized for its keys, up to about 50 in one partly
// full (BenchmarkScale, BenchmarkTokenBucketBytesPerKey).
//
// Besides AllowN it offers WaitN, which blocks until the tokens are there
// (without queueing waiters, see the package-level WaitN), and RefundN,
// which gives back what an allowed call took so that a Composite can be
// all or nothing.
//
// A TokenBucket is safe for concurrent use.
type TokenBucket struct {
	// cur is the rate the bucket decides under, for Rate, Burst and the
	// cost check before a decision; each shard of the store holds the
	// one its keys are in (see SetRate).
	cur   atomic.Pointer[tbAlg]
	store *store[tbState, *tbAlg]
}

// tbAlg is a token bucket's rate: its parameters and its state machine
// over one key's state.
type tbAlg struct {
	rate     Rate
	burst    int
	interval bool
	limit    uint64 // Rate.Limit
	period   uint64 // Rate.Period in ns
	// tick is Period/Limit when it divides exactly: then a decision adds
	// no fraction and the hot path needs no 128-bit arithmetic (a change
	// of rate may leave one, which the decisions carry along).
	tick int64
	// tau = burst·Period/Limit = tauQ + tauR/Limit ns: how far the
	// theoretical arrival time may run ahead of now.
	tauQ, tauR int64
	// debts bounds a key's debt (WithMaxDebt), owing in this rate's terms.
	debts DebtLimits
	owing debtCap
}

// tbState is one bucket. Greedy refill: tat + frac/Limit is the theoretical
// arrival time in ns since the limiter's epoch (frac in [0, Limit)).
// Interval refill: tat is the start of the current period and frac the
// tokens used; or, with frac = blocked, the bucket allows nothing before
// tat and is full from then on (see restore). The zero value is a full
// bucket in both modes.
type tbState struct {
	tat  int64
	frac int64
}

// maxTau bounds burst·Period/Limit so that every sum of times fits in int64.
const maxTau = 1 << 61

// NewTokenBucket returns a token bucket refilling r.Limit tokens per
// r.Period. It accepts WithBurst, WithIntervalRefill, WithMaxDebt,
// WithMaxKeys, WithMaxKeyLength, WithShards and WithClock; invalid values, and options
// that do not apply, are reported as errors wrapping ErrInvalidRate or
// ErrInvalidOption.
func NewTokenBucket(r Rate, opts ...Option) (*TokenBucket, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c, err := newConfig(kindTokenBucket, opts)
	if err != nil {
		return nil, err
	}
	burst := r.Limit
	if c.burstSet {
		burst = c.burst
	}
	a, err := newTBAlg(r, burst, c.interval, c.debt)
	if err != nil {
		return nil, err
	}
	b := &TokenBucket{}
	b.cur.Store(a)
	if b.store, err = newStore[tbState](c, a); err != nil {
		return nil, err
	}
	return b, nil
}

// newTBAlg checks that burst tokens at r fit the bucket's horizon and
// returns the parameters.
func newTBAlg(r Rate, burst int, interval bool, debts DebtLimits) (*tbAlg, error) {
	a := &tbAlg{rate: r, burst: burst, interval: interval, limit: uint64(r.Limit), period: uint64(r.Period),
		debts: debts, owing: newDebtCap(debts, r, burst)}
	hi, lo := bits.Mul64(uint64(burst), a.period)
	if hi >= a.limit {
		return nil, fmt.Errorf("%w: burst %d at %s is too long a horizon", ErrInvalidRate, burst, r)
	}
	q, rem := bits.Div64(hi, lo, a.limit)
	if q >= maxTau || a.period >= maxTau {
		return nil, fmt.Errorf("%w: burst %d at %s is too long a horizon", ErrInvalidRate, burst, r)
	}
	a.tauQ, a.tauR = int64(q), int64(rem)
	if a.period%a.limit == 0 {
		a.tick = int64(a.period / a.limit)
	}
	return a, nil
}

// WithIntervalRefill makes a token bucket refill intervally: instead of a
// token every Period/Limit, the whole Rate.Limit comes back at once when a
// Period has passed (Bucket4j's refillIntervally, Resilience4j's
// limitForPeriod). Periods are counted per key from its first event after
// its bucket was last full.
//
// The trade-off is the boundary double burst: a client can spend the whole
// bucket just before a period ends and Rate.Limit more just after, so up to
// burst + Rate.Limit events can happen within a moment. Use it where that
// is acceptable and a simple "N per period" is what users were promised;
// prefer the greedy default or a SlidingLog otherwise. It applies only to
// NewTokenBucket.
func WithIntervalRefill() Option {
	return func(c *config) error {
		c.interval = true
		return c.once("WithIntervalRefill")
	}
}

// Rate returns the rate the bucket decides under: the one it was
// created with, or the last one SetRate set.
func (b *TokenBucket) Rate() Rate { return b.cur.Load().rate }

// Burst returns the capacity of each bucket.
func (b *TokenBucket) Burst() int { return b.cur.Load().burst }

// Allow is AllowN(ctx, key, 1), inlinable as AllowN is.
func (b *TokenBucket) Allow(_ context.Context, key string) (d Decision, err error) {
	err = b.allowN(&d, key, 1)
	return d, err
}

// AllowN takes n tokens from key's bucket if it holds n, and reports the
// decision either way; n == 0 reports without taking. A cost above the
// burst returns ErrCostExceedsLimit with the key's current Remaining and
// ResetAfter and no RetryAfter, since waiting cannot help. The context is
// not consulted: an in-memory decision does not block.
//
// AllowN is small enough to be inlined, so the Decision is built in the
// caller's frame by allowN instead of being copied out through each
// return (40 bytes, a fifth of a hot-key decision).
func (b *TokenBucket) AllowN(_ context.Context, key string, n int) (d Decision, err error) {
	err = b.allowN(&d, key, n)
	return d, err
}

func (b *TokenBucket) allowN(d *Decision, key string, n int) error {
	burst := b.cur.Load().burst
	if n < 0 || n > burst {
		if err := b.above(d, key, n, burst); err != nil {
			return err
		}
	}
	cost := n
	err := b.store.run(key, n > 0, func(a *tbAlg, st *tbState, now int64) {
		if n > a.burst {
			n = 0 // the burst shrank under a SetRate still under way: report
		}
		a.decide(d, st, now, n)
	})
	switch {
	case err != nil:
		*d = Decision{Limit: burst}
		return err
	case n != cost:
		d.Allowed = false
		return checkCost(cost, d.Limit)
	}
	return nil
}

// above judges a cost that the published burst refuses (n above it, or
// negative). While SetRate converts the shards, the published burst is
// still the old one although key may already decide under the new: the
// cost is judged, under key's lock, by the burst of the rate key decides
// under, never by one it no longer decides under. Above that burst it
// returns ErrCostExceedsLimit with the key's real quota (so that headers
// stay truthful) and no RetryAfter, since waiting cannot help; within it
// (a larger burst already there) it returns nil, and the caller decides
// as for any cost, its own lock judging the cost again.
func (b *TokenBucket) above(d *Decision, key string, n, burst int) error {
	if n < 0 {
		*d = Decision{Limit: burst}
		return checkCost(n, burst)
	}
	fits := false
	err := b.store.run(key, false, func(a *tbAlg, st *tbState, now int64) {
		if fits = n <= a.burst; !fits {
			a.decide(d, st, now, 0)
		}
	})
	switch {
	case err != nil:
		*d = Decision{Limit: burst}
		return err
	case fits:
		return nil
	}
	d.Allowed = false
	return checkCost(n, d.Limit)
}

// decide is the bucket's state machine for one key at now.
func (a *tbAlg) decide(d *Decision, st *tbState, now int64, n int) {
	if a.interval {
		a.decideInterval(d, st, now, n)
	} else {
		a.decideGreedy(d, st, now, n)
	}
}

// SetRate makes the bucket decide under a new rate and burst from now on,
// converting every key's bucket as it stands as c.Inherit says: the
// tokens each key has taken and not yet got back are the units it has
// used (see Inherit). The greedy bucket converts exactly, keeping the
// new arrival time to a billionth of a nanosecond... rounded up to
// 1/Limit ns, never earlier than exact; an intervally refilled bucket
// keeps the start of its current period, and from it periods of the new
// length. A wait longer than 2^61 ns (73 years) that a downgrade would
// give a key that spent much more than its new capacity is held at that.
//
// The debts the store remembers for evicted keys are converted with
// them, as the state each restores to, so a key evicted before the
// change comes back as it would have had it stayed tracked, or stricter
// (see WithDebtMemory). Decisions go on meanwhile: each shard of the
// store is converted under its lock, about 0.2 µs per key it holds, and a
// decision sees a key either before the change or after it. c is checked
// as NewTokenBucket checks its rate and WithBurst; the refill mode
// (WithIntervalRefill) stays. Changes are made one at a time; Rate and
// Burst report the new values once SetRate returns. The context is not
// consulted.
func (b *TokenBucket) SetRate(_ context.Context, c RateChange) error {
	if err := c.Rate.Validate(); err != nil {
		return err
	}
	burst, err := c.burstOf()
	if err != nil {
		return err
	}
	old := b.cur.Load()
	a, err := newTBAlg(c.Rate, burst, old.interval, old.debts)
	if err != nil {
		return err
	}
	b.store.change(a, c.Inherit, func() { b.cur.Store(a) })
	return nil
}

// Reset refills key's bucket, also when the key was evicted and its debt
// remembered, and for good: it stays full until the key spends again.
func (b *TokenBucket) Reset(_ context.Context, key string) error {
	return b.store.reset(key)
}

// Wait is WaitN(ctx, key, 1).
func (b *TokenBucket) Wait(ctx context.Context, key string) error {
	return WaitN(ctx, b, key, 1)
}

// WaitN blocks until n tokens can be taken from key's bucket and takes
// them, or returns an error: at once if ctx's deadline comes before the
// tokens would (ErrWouldExceedDeadline), or when ctx is done. See the
// package-level WaitN; waiters are not queued.
func (b *TokenBucket) WaitN(ctx context.Context, key string, n int) error {
	return WaitN(ctx, b, key, n)
}

// RefundN gives back n tokens that an allowed AllowN took from key's
// bucket, as if that call had never happened: the theoretical arrival time
// moves back by n·Period/Limit, but never below now, so a bucket never
// holds more than its burst. A key that was evicted since gets the refund
// on its remembered debt; a full bucket is left alone. Composite uses it
// to undo a partial consumption; a caller refunding tokens it never took
// only gives the key credit up to a full bucket.
func (b *TokenBucket) RefundN(_ context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: refund of n = %d is negative", ErrInvalidCost, n)
	}
	return b.store.refund(key, func(a *tbAlg, st *tbState, now int64) {
		switch {
		case n == 0:
		case a.interval:
			a.refundInterval(st, now, n)
		default:
			a.refundGreedy(st, now, n)
		}
	})
}

// Stats reports the size of the key store and its evictions.
func (b *TokenBucket) Stats() Stats { return b.store.stats() }

// decideGreedy is GCRA: the event fits if, after adding its cost to the
// theoretical arrival time, that time is no more than tau ahead of now.
func (a *tbAlg) decideGreedy(d *Decision, st *tbState, now int64, n int) {
	tat, frac := st.tat, st.frac
	if tat < now { // the bucket is full: start from now
		tat, frac = now, 0
	}
	ntat, nfrac := a.advance(tat, frac, n)
	ahead := ntat - now
	*d = Decision{Limit: a.burst}
	// A report (n == 0) is allowed even when a downgrade left the bucket
	// owing more than its burst (see SetRate).
	if n == 0 || ahead < a.tauQ || (ahead == a.tauQ && nfrac <= a.tauR) {
		d.Allowed = true
		tat, frac = ntat, nfrac
		st.tat, st.frac = tat, frac
	} else {
		// The earliest time at which ntat - t <= tau, rounded up to a ns.
		wait, wfrac := ahead-a.tauQ, nfrac-a.tauR
		if wfrac < 0 {
			wait--
			wfrac += int64(a.limit)
		}
		if wfrac > 0 {
			wait++
		}
		d.RetryAfter = durationNS(wait)
	}
	// tat >= now here; the tokens missing are (tat-now)·Limit/Period.
	owed := tat - now
	d.Remaining = a.burst - a.tokensCeil(owed, frac)
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	if frac > 0 {
		owed++
	}
	d.ResetAfter = durationNS(owed)
}

// refundGreedy moves the theoretical arrival time back by n·Period/Limit,
// to now at the earliest (a full bucket).
func (a *tbAlg) refundGreedy(st *tbState, now int64, n int) {
	if n > a.burst {
		n = a.burst // a larger refund cannot do more than fill the bucket
	}
	dq, dr := a.advance(0, 0, n) // n·Period/Limit as (ns, fraction)
	tat, frac := st.tat-dq, st.frac-dr
	if frac < 0 {
		tat--
		frac += int64(a.limit)
	}
	if tat < now {
		tat, frac = now, 0
	}
	st.tat, st.frac = tat, frac
}

// advance returns (tat + frac/L) + n·Period/Limit as (ns, fraction).
func (a *tbAlg) advance(tat, frac int64, n int) (int64, int64) {
	if a.tick > 0 {
		return tat + int64(n)*a.tick, frac
	}
	hi, lo := bits.Mul64(uint64(n), a.period)
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	q, r := bits.Div64(hi+carry, lo, a.limit) // n <= burst: no overflow (checked in NewTokenBucket)
	return tat + int64(q), int64(r)
}

// tokensCeil returns ceil((ns + frac/L)·Limit/Period): the whole tokens
// that a debt of that many nanoseconds stands for.
func (a *tbAlg) tokensCeil(ns, frac int64) int {
	if a.tick > 0 {
		if frac > 0 { // a fraction of a ns, left by a change of rate
			return int(ns/a.tick + 1)
		}
		return int((ns + a.tick - 1) / a.tick)
	}
	hi, lo := bits.Mul64(uint64(ns), a.limit)
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	if hi+carry >= a.period { // a debt far beyond the burst (ChargeN)
		return math.MaxInt
	}
	q, r := bits.Div64(hi+carry, lo, a.period)
	if r > 0 {
		q++
	}
	return int(q)
}

// debt returns what st owes (see debt), exactly. Greedy: the first
// nanosecond at or after the theoretical arrival time, and the fraction
// of it, in 1..Limit (Limit: none), by which that time is earlier.
// Interval: the time at which its last used token comes back, and the
// tokens that refill then, in 1..Limit, which with the period determine
// the state; a blocked bucket owes 0 tokens until it is full.
func (a *tbAlg) debt(st *tbState, _ int64) debt {
	if !a.interval {
		if st.frac > 0 {
			return debt{at: st.tat + 1, amt: uint32(st.frac)}
		}
		return debt{at: st.tat, amt: uint32(a.limit)}
	}
	switch st.frac {
	case 0:
		return debt{}
	case blocked:
		return debt{at: st.tat}
	}
	// Rounded up by the debt memory, it is restored as a bound: blocked
	// until its time (see restore). The checker's IntervalTokenBucket/
	// Evictions target once read such a denial, of a key reset before
	// other keys' debts were merged into the bound that binds it, as a
	// lapsed Reset (FLOODGATE_CHECK_SEED=174180875339155, 3 runs in 4):
	// the bound ended a rounding after those debts (see laterDebt in
	// floodgatetest).
	limit := int64(a.limit)
	periods := (st.frac + limit - 1) / limit
	return debt{at: st.tat + periods*int64(a.period), amt: uint32(st.frac - (periods-1)*limit)}
}

// restore sets st to the state of a bucket that owes v at now, exactly
// as debt took it (see algorithm). The larger either number of v, the
// later the bucket is full again and the fewer tokens it holds meanwhile.
func (a *tbAlg) restore(st *tbState, v debt, now int64) {
	*st = tbState{}
	if !v.owes(now) {
		return
	}
	if !a.interval {
		st.tat, st.frac = v.at-1, int64(v.amt)
		if st.frac >= int64(a.limit) {
			st.tat, st.frac = v.at, 0
		}
		return
	}
	// v.amt tokens come back at v.at, and Limit more at each of the
	// periods before it that have not begun yet. Interval buckets are not
	// ordered by their tokens alone: tokens taken from a bucket whose
	// periods began earlier come back sooner, so a bucket with fewer
	// tokens but an earlier phase can allow more later than one with more.
	// A bound shared by several keys, whose periods began at other times,
	// is therefore restored as a bucket that allows nothing until v.at and
	// is full from then on, which allows no more than any of them.
	if v.shared || v.amt == 0 {
		st.tat, st.frac = v.at, blocked
		return
	}
	period := int64(a.period)
	periods := (v.at - now + period - 1) / period
	st.tat, st.frac = v.at-periods*period, int64(v.amt)+(periods-1)*int64(a.limit)
}

// intervalAt returns the interval state at now: the start of the current
// period and the tokens used in it, every whole period since the stored
// start having given Limit tokens back. A full bucket (used == 0) starts
// its period now.
func (a *tbAlg) intervalAt(st *tbState, now int64) (start, used int64) {
	return a.intervalRate().Roll(st.tat, st.frac, now)
}

// blocked is the frac of an interval bucket that allows nothing until tat.
const blocked = -1

// decideInterval: tat is the start of the current period, frac the tokens
// used; every whole period since then gives Limit tokens back.
func (a *tbAlg) decideInterval(d *Decision, st *tbState, now int64, n int) {
	if st.frac == blocked {
		if now < st.tat {
			wait := durationNS(st.tat - now)
			*d = Decision{Allowed: n == 0, Limit: a.burst, ResetAfter: wait}
			if n > 0 {
				d.RetryAfter = wait
			}
			return
		}
		*st = tbState{}
	}
	start, used := a.intervalAt(st, now)
	period, limit := int64(a.period), int64(a.limit)
	*d = Decision{Limit: a.burst}
	if n == 0 || used+int64(n) <= int64(a.burst) {
		d.Allowed = true
		used += int64(n)
	} else {
		k := (used + int64(n) - int64(a.burst) + limit - 1) / limit
		d.RetryAfter = durationNS(start + k*period - now)
	}
	if d.Allowed || used > 0 {
		st.tat, st.frac = start, used
	}
	d.Remaining = max(a.burst-int(used), 0)
	if used > 0 {
		d.ResetAfter = durationNS(start + (used+limit-1)/limit*period - now)
	}
}

// refundInterval gives n used tokens of the current period back; tokens
// already returned by a period boundary are not returned twice.
func (a *tbAlg) refundInterval(st *tbState, now int64, n int) {
	if st.frac == blocked {
		return // nothing was taken from a blocked bucket
	}
	start, used := a.intervalAt(st, now)
	used -= int64(n)
	if used < 0 {
		used = 0
	}
	st.tat, st.frac = start, used
}

// convert sets st, a bucket under a at now, to the bucket under b that
// inherits what it has used as how says (see algorithm.convert).
func (a *tbAlg) convert(st *tbState, b *tbAlg, how Inherit, now int64) {
	switch {
	case how == StartFresh:
		*st = tbState{}
	case a.interval:
		a.convertInterval(st, b, how, now)
	default:
		a.convertGreedy(st, b, how, now)
	}
}

// convertGreedy converts a greedy bucket exactly: it has used
// u = ((tat − now)·Limit + frac)/Period tokens, and the new arrival time
// is now + how(u)·Period'/Limit', rounded up to the 1/Limit' ns the state
// keeps (see inherit.Greedy).
func (a *tbAlg) convertGreedy(st *tbState, b *tbAlg, how Inherit, now int64) {
	if st.tat < now {
		*st = tbState{} // full: nothing used
		return
	}
	q, r := inherit.Greedy(uint64(st.tat-now), uint64(st.frac), a.bucket(), b.bucket(), inherit.Strategy(how), maxTau)
	if q == 0 && r == 0 {
		*st = tbState{}
		return
	}
	st.tat, st.frac = now+int64(q), int64(r)
}

// bucket returns the rate as inherit takes it.
func (a *tbAlg) bucket() inherit.Bucket {
	return inherit.Bucket{Limit: a.limit, Period: a.period, Burst: uint64(a.burst)}
}

// convertInterval converts an intervally refilled bucket: it keeps the
// start of its current period, with how(used) tokens used, and from it
// periods of b's length. A bucket that allows nothing until tat (a bound
// restored from the debt memory, see restore) stands for keys whose
// periods began at now or before and that are full by tat: each has used
// at most Limit tokens for each period from now to tat, so it becomes a
// bucket that allows nothing until that many, converted, are back under b,
// counting from now.
func (a *tbAlg) convertInterval(st *tbState, b *tbAlg, how Inherit, now int64) {
	from, to := a.intervalRate(), b.intervalRate()
	if st.frac == blocked {
		if now >= st.tat {
			*st = tbState{}
			return
		}
		most := a.limit * uint64((st.tat-now+int64(a.period)-1)/int64(a.period))
		u := inherit.IntervalUsed(most, from, to, inherit.Strategy(how), maxTau)
		if u == 0 {
			*st = tbState{}
			return
		}
		st.tat = now + int64((u+b.limit-1)/b.limit)*int64(b.period)
		return
	}
	start, used := from.Roll(st.tat, st.frac, now)
	u := inherit.IntervalUsed(uint64(used), from, to, inherit.Strategy(how), maxTau)
	if u == 0 {
		*st = tbState{}
		return
	}
	st.tat, st.frac = start, int64(u)
}

// interval returns the rate as inherit takes it.
func (a *tbAlg) intervalRate() inherit.Interval {
	return inherit.Interval{Limit: a.limit, Period: a.period, Burst: uint64(a.burst)}
}

// moveTo moves key's bucket into to, another token bucket of the same
// refill mode, converted as how says (see PlanLimiter).
func (b *TokenBucket) moveTo(to Limiter, key string, how Inherit) (bool, error) {
	t, ok := to.(*TokenBucket)
	if !ok || t.cur.Load().interval != b.cur.Load().interval || !sameClock(&b.store.clock, &t.store.clock) {
		return false, nil
	}
	st, owes, err := b.store.take(key, t.store.algOf(key), how)
	if err != nil || !owes {
		return true, err
	}
	return true, t.store.put(key, st)
}

// holds reports whether the bucket of key is not full.
func (b *TokenBucket) holds(key string) bool { return b.store.owes(key) }
