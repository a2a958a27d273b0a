package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore/internal/groupcommit"
)

// clientClockMinTTL is the shortest expiry of a key written on a client
// clock. Redis expires keys by its own clock, which a test's fake clock
// does not move: held still for a burst of decisions, a key could vanish
// in real time while its state still counts in the fake one. A key kept
// longer is harmless: every script treats state that has aged out on the
// limiter's clock as fresh, whatever Redis still holds.
const clientClockMinTTL = 10 * time.Second

// maxLimit mirrors the bound floodgate.Rate.Validate puts on a limit.
const maxLimit = 1 << 24

// maxMicros bounds every time and horizon the scripts handle, in
// microseconds. Lua numbers are doubles, exact for integers below 2^53; a
// time below 2^52 (the year 2112 as Unix microseconds) plus a horizon below
// 2^50 (35 years) plus one cost of at most that horizon stays below 2^53.
const (
	maxMicros  = 1 << 52
	maxHorizon = 1 << 50
)

// Compile-time checks that every Redis limiter is a floodgate.Limiter,
// can be reset, refunded and asked its capacity, and reports where its
// state lives.
var (
	_ floodgate.Limiter    = (*TokenBucket)(nil)
	_ floodgate.Resetter   = (*TokenBucket)(nil)
	_ floodgate.Refunder   = (*TokenBucket)(nil)
	_ floodgate.Capacitor  = (*TokenBucket)(nil)
	_ floodgate.Namespacer = (*TokenBucket)(nil)
	_ floodgate.Limiter    = (*SlidingLog)(nil)
	_ floodgate.Resetter   = (*SlidingLog)(nil)
	_ floodgate.Refunder   = (*SlidingLog)(nil)
	_ floodgate.Capacitor  = (*SlidingLog)(nil)
	_ floodgate.Namespacer = (*SlidingLog)(nil)
	_ floodgate.Limiter    = (*SlidingCounter)(nil)
	_ floodgate.Resetter   = (*SlidingCounter)(nil)
	_ floodgate.Refunder   = (*SlidingCounter)(nil)
	_ floodgate.Capacitor  = (*SlidingCounter)(nil)
	_ floodgate.Namespacer = (*SlidingCounter)(nil)
)

// base is what every Redis limiter shares: the client, the key prefix, the
// clock, the per-decision timeout, the fallback and the deny cache.
type base struct {
	client    Scripter
	prefix    string
	timeout   time.Duration
	deadlines deadlines // bounds a round trip by timeout (bound)
	maxKeyLen int

	// now is the client clock (WithClock); nil means the scripts read the
	// server's TIME. last holds the latest client time seen, in
	// microseconds, so that a step backwards is held.
	now   func() time.Time
	last  atomic.Int64
	epoch time.Time // origin of the local monotonic clock
	// minTTL is the shortest expiry, in milliseconds, the scripts set: "0"
	// on the server's clock, clientClockMinTTL with a client clock.
	minTTL string

	fallback floodgate.Limiter
	breaker  breaker
	deny     *denyCache
	counts   counters // behind Stats
	rates    rates    // the rate decided under, and its record in Redis
	// fixedLimit is Decision.Limit of a limiter without a rate (an
	// in-flight limit), whose rates are not set up.
	fixedLimit int
	// lease holds the leases (WithLease, lease.go); nil in the plain mode.
	lease *leaseTable
	// debt bounds what ChargeN charges (WithMaxDebt).
	debt floodgate.DebtLimits
}

// configured is implemented by a Scripter whose options can be invalid
// (goredisstore and rueidisstore: Err).
type configured interface{ Err() error }

// init sets up l in place (it holds atomics, which must not be copied).
func (l *base) init(client Scripter, c config) error {
	if client == nil {
		return fmt.Errorf("%w: nil Scripter", floodgate.ErrInvalidOption)
	}
	if c, ok := client.(configured); ok {
		if err := c.Err(); err != nil {
			// Refused here rather than on every decision, where a
			// fallback would answer in Redis's place for good.
			return fmt.Errorf("invalid Scripter: %w", err)
		}
	}
	l.client = client
	l.prefix = c.prefix
	l.timeout = c.timeout
	l.deadlines.init(c.timeout)
	l.maxKeyLen = c.maxKeyLen
	l.now = c.now
	l.epoch = time.Now()
	l.minTTL = "0"
	if c.now != nil {
		l.minTTL = strconv.FormatInt(clientClockMinTTL.Milliseconds(), 10)
	}
	l.fallback = c.fallback
	l.debt = c.debt
	l.breaker.interval = int64(c.probeInterval)
	if c.denyCache > 0 {
		l.deny = newDenyCache(c.denyCache)
	}
	return nil
}

// checkKey refuses keys longer than the configured bound.
func (l *base) checkKey(key string) error {
	if len(key) > l.maxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", floodgate.ErrKeyTooLong, len(key), l.maxKeyLen)
	}
	return nil
}

// clock returns the local time in nanoseconds (for the deny cache) and the
// time argument of the scripts: "" for the server's TIME, or the client
// clock's reading in microseconds.
func (l *base) clock() (local int64, arg string, err error) {
	local, us, err := l.readClock()
	return local, timeArg(us), err
}

// readClock returns the local time in nanoseconds (for the deny cache)
// and the client clock's reading in microseconds, never earlier than one
// it returned before; -1 for the server's TIME. The script's argument is
// formatted from it by timeArg only when a round trip needs it: a
// decision the deny cache answers formats nothing.
func (l *base) readClock() (local, us int64, err error) {
	if l.now == nil {
		return int64(time.Since(l.epoch)), -1, nil
	}
	us = l.now().UnixMicro()
	if us < 0 || us >= maxMicros {
		return 0, -1, fmt.Errorf("%w: clock reading %d us since 1970 is outside 0..2^52", floodgate.ErrInvalidOption, us)
	}
	for {
		last := l.last.Load()
		if us <= last {
			us = last
			break
		}
		if l.last.CompareAndSwap(last, us) {
			break
		}
	}
	return us * 1000, us, nil
}

// timeArg is the scripts' time argument for a readClock reading us: ""
// for the server's TIME (us < 0), else us in decimal.
func timeArg(us int64) string {
	if us < 0 {
		return ""
	}
	return strconv.FormatInt(us, 10)
}

// evalFunc runs one algorithm's script for key at time arg (see clock).
type evalFunc func(ctx context.Context, key string, n int, now string) (floodgate.Decision, error)

// Capacity returns the largest cost one AllowN can ever be allowed: the
// token bucket's burst, a window's Rate.Limit. It makes every Redis
// limiter a floodgate.Capacitor, so the middleware refuses at construction
// a WithCost no request could pay.
func (l *base) Capacity() int { return l.limit() }

// limit returns Decision.Limit under the current rate: the burst of a
// token bucket, a window's Limit.
func (l *base) limit() int {
	if v := l.rates.view.Load(); v != nil {
		return int(v.rec.rate.burst)
	}
	return l.fixedLimit
}

// decide is the decision path shared by every limiter: the deny cache,
// then Redis under the per-decision timeout, then on failure the fallback
// if there is one.
func (l *base) decide(ctx context.Context, key string, n int, eval evalFunc) (floodgate.Decision, error) {
	if err := l.checkKey(key); err != nil {
		return floodgate.Decision{Limit: l.limit()}, err
	}
	local, us, err := l.readClock()
	if err != nil {
		return floodgate.Decision{Limit: l.limit()}, err
	}
	// The key's ticket, taken before the round trip: an undo of this
	// process that overlaps it keeps its denial out of the cache.
	var tk denyTicket
	if l.deny != nil && n > 0 {
		tk = l.deny.ticket(key, local)
		// Only under the rate read within the refresh interval: a change
		// of rate drops every denial made before it (see denyCache).
		if ver, fresh := l.rateRead(); fresh {
			if d, ok := l.deny.lookup(key, tk, n, ver, l.limit()); ok {
				l.counts.denyCacheHits.Add(1)
				return d, nil
			}
		}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The caller hung up before the round trip: nobody waits for the
		// decision, so nothing is charged for it.
		l.counts.canceledErrors.Add(1)
		return floodgate.Decision{Limit: l.limit()}, errCallerGone(ctx)
	}
	// The probe interval is real time even on a client clock: it paces
	// attempts to reach a server, which a fake clock knows nothing about.
	var real int64
	if l.fallback != nil {
		real = int64(time.Since(l.epoch))
		if !l.breaker.tryRedis(real) {
			l.counts.fallbackDecisions.Add(1)
			return l.fallback.AllowN(ctx, key, n)
		}
	}
	cctx, cancel := l.bound(ctx)
	err = l.refreshRate(cctx)
	var d floodgate.Decision
	// The version before the round trip: a denial is cached under it, or
	// under an older one than it was given under, which only drops it
	// sooner.
	ver, _ := l.rateRead()
	if err == nil {
		d, err = eval(cctx, key, n, timeArg(us))
	}
	if cancel != nil {
		cancel()
	}
	if err != nil {
		return l.failed(ctx, key, n, real, err)
	}
	if l.fallback != nil {
		l.breaker.succeed()
	}
	if l.deny != nil && n > 0 {
		if d.Allowed {
			// This key consumed: a cached denial of another cost would
			// now understate its RetryAfter.
			l.deny.remove(key)
		} else {
			// The entry starts at local (the ticket's), read before the
			// request was sent: the server decided at that time or later,
			// so the entry never outlives the true RetryAfter.
			l.deny.store(key, tk, n, ver, d)
		}
	}
	return d, nil
}

// failed answers a decision whose round trip failed with err: the
// caller's hang-up is not an outage, an allowed decision the replicas did
// not acknowledge is Redis's answer all the same, and anything else goes
// to the fallback if there is one. real is the local time the breaker
// reads (see decide).
func (l *base) failed(ctx context.Context, key string, n int, real int64, err error) (floodgate.Decision, error) {
	if errors.Is(err, floodgate.ErrCostExceedsLimit) {
		// A change of rate read during the decision shrank the capacity
		// below n: the client's problem, not Redis's.
		return floodgate.Decision{Limit: l.limit()}, err
	}
	if errors.Is(err, errRateChurn) && ctx.Err() == nil {
		// Redis answered every try: it is not down, and the limit is not
		// off. An error here would be an outage to fail-open and the
		// fallback, a pass on demand for whoever can keep a rate moving.
		if l.fallback != nil {
			l.breaker.succeed()
		}
		l.counts.churnDenials.Add(1)
		return l.churnDenied(), nil
	}
	l.counts.countError(err)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller hung up: not an outage, so neither the breaker nor
		// the fallback hears of it.
		return floodgate.Decision{Limit: l.limit()}, errCallerGone(ctx)
	case errors.Is(err, ErrNotReplicated):
		// Redis allowed the decision and the master charged it (eval
		// reports a denial as a denial): the fallback would decide a
		// second time, and Redis is not down.
		if l.fallback != nil {
			l.breaker.succeed()
		}
		if l.deny != nil {
			l.deny.remove(key)
		}
	case l.fallback != nil && ctx.Err() == nil:
		l.breaker.fail(real)
		l.counts.fallbackDecisions.Add(1)
		return l.fallback.AllowN(ctx, key, n)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// Say whose deadline it was: a slow or stalled server, not a
		// refused connection (which keeps its own cause).
		err = fmt.Errorf("no reply within the %v decision timeout: %w", l.timeout, err)
	}
	return floodgate.Decision{Limit: l.limit()}, fmt.Errorf("%w: %w", ErrRedis, err)
}

// maxChurnWait bounds the RetryAfter of a decision denied because the
// rate kept changing (churnDenied).
const maxChurnWait = time.Second

// churnDenied is the answer to a decision that met a new rate at every
// try (errRateChurn): a denial of the busy kind (Decision.Overloaded, HTTP
// 503 with Retry-After, gRPC Unavailable), never an error, so that no
// error policy and no fallback lets it through, and not cached by the
// deny cache (decide stores only the denials Redis made). Nothing was
// taken. The wait is the rate refresh interval, within which every
// instance reads the newest rate and disagreements settle, but at most
// maxChurnWait: a client that comes back sooner meets, at worst, the same
// answer.
func (l *base) churnDenied() floodgate.Decision {
	wait := min(l.rates.refresh, maxChurnWait)
	return floodgate.Decision{Overloaded: true, Limit: l.limit(), RetryAfter: wait, ResetAfter: wait}
}

// reply runs a decision script and checks that it replied want integers
// (any number for want < 0).
// A reply that came with ErrNotReplicated (WithWaitReplicas: the master
// ran the script, too few replicas acknowledged it in time) is returned
// with that error as unrepl and err nil, so that the caller reads the
// decision; see replicated.
func (l *base) reply(ctx context.Context, s *script, keys, args []string, want int) (r []int64, unrepl, err error) {
	r, err = s.run(ctx, l.client, keys, args)
	if err != nil && errors.Is(err, ErrNotReplicated) && r != nil {
		unrepl, err = err, nil
	}
	if err == nil && want >= 0 {
		err = expectInts(r, want)
	}
	return r, unrepl, err
}

// replicated returns the error of a decision d of cost n whose writes
// were not acknowledged (unrepl, from reply): only an allowed decision
// that consumed keeps it. A denial is a denial whatever the replication —
// reporting it as an error would let a fail-open policy or a fallback
// through — and a report (n == 0) consumed nothing a failover could lose.
func replicated(d floodgate.Decision, n int, unrepl error) error {
	if d.Allowed && n > 0 {
		return unrepl
	}
	return nil
}

// bound returns ctx bounded by the per-decision timeout, and the cancel
// function to call after the round trip (nil when there is none). A
// caller's context whose deadline comes first is used as it is; one that
// can never end (context.Background) is bounded by a deadline shared with
// the other decisions of its grain (see deadlines); each saves
// context.WithTimeout's timer and allocations. A context that can end
// before the timeout, by the caller's own deadline (which a client may
// choose) or cancellation, is marked so that an adapter sharing
// connections among callers sends its commands under one that only the
// timeout ends (see groupcommit.Bounded).
func (l *base) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout {
		return groupcommit.Bounded{Context: ctx, Timeout: &l.deadlines}, nil
	}
	if ctx.Done() == nil {
		return l.deadlines.bound(ctx), nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	return groupcommit.Bounded{Context: ctx, Timeout: &l.deadlines}, cancel
}

// errCallerGone is the error of a decision whose caller's context was
// cancelled (the client went away): it wraps context.Canceled and not
// ErrRedis, since Redis did nothing wrong.
func errCallerGone(ctx context.Context) error {
	return fmt.Errorf("redisstore: decision abandoned, the caller's context is done: %w", ctx.Err())
}

// reset deletes keys (all of one client) and forgets the client in the
// deny cache and the fallback.
func (l *base) reset(ctx context.Context, key string, keys []string) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	var errs []error
	if r, ok := l.fallback.(floodgate.Resetter); ok {
		errs = append(errs, r.Reset(ctx, key))
	}
	cctx, cancel := l.bound(ctx)
	_, err := resetScript.run(cctx, l.client, keys, nil)
	if cancel != nil {
		cancel()
	}
	if l.deny != nil {
		// After the round trip, whatever came of it: a denial made
		// before the reset ran may still be on its way (see denyCache).
		l.deny.forget(key)
	}
	if err != nil {
		l.counts.countError(err)
		errs = append(errs, fmt.Errorf("%w: %w", ErrRedis, err))
	}
	return errors.Join(errs...)
}

// refund runs a refund script for key under the per-decision timeout. It
// does not go to the fallback: units taken from Redis are given back to
// Redis or not at all. It drops the key's cached denial, which the refund
// may have made too long, once the round trip is over (see denyCache).
func (l *base) refund(ctx context.Context, key string, run func(ctx context.Context, now string) error) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	_, arg, err := l.clock()
	if err != nil {
		return err
	}
	cctx, cancel := l.bound(ctx)
	// A charge or a refund is made under the rate every instance decides
	// under: one that only charges (WithCostAfter's settlement) reads a
	// changed record as a decision does.
	err = l.refreshRate(cctx)
	if err == nil {
		err = run(cctx, arg)
	}
	if cancel != nil {
		cancel()
	}
	if l.deny != nil {
		l.deny.forget(key)
	}
	if err != nil {
		l.counts.countError(err)
		return fmt.Errorf("%w: %w", ErrRedis, err)
	}
	return nil
}

// expectInts checks the length of a script's reply.
func expectInts(r []int64, n int) error {
	if len(r) != n {
		return fmt.Errorf("unexpected script reply %v: want %d integers", r, n)
	}
	return nil
}

// errBadReply reports a script reply out of the range it can take.
func errBadReply(r []int64) error {
	return fmt.Errorf("script reply %v out of range", r)
}
