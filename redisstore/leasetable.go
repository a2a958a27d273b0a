package redisstore

import (
	"hash/maphash"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// leaseTable holds, per client key, the lease this instance holds and what
// it needs to size the next one. It is sharded like the deny cache, each
// shard a bounded LRU behind one mutex; no lock is held across a round
// trip. Dropping an entry (eviction, Reset) loses its unused units: they
// stay charged in Redis and are never allowed, so memory pressure costs
// quota and never adds to it.
type leaseTable struct {
	cfg  Lease
	algo leaseAlgo
	// rate is what leases depend on of the rate decided under; each lease
	// keeps the times it was taken with (see reconfigure).
	rate   atomic.Pointer[leaseRate]
	margin bool // shorten lease times against clock drift (server clock)
	// keepTails: the units a lease leaves unused go back to Redis, from
	// the window they were counted in (the sliding counter); without it
	// they are stranded. ended, when set, is called by an entry's timer
	// when its lease ends, to give them back if no round trip has (the
	// counter on the server's clock).
	keepTails bool
	ended     func(key string, e *leaseEntry)
	seed      maphash.Seed
	shards    []leaseShard
	mask      uint64
}

type leaseShard struct {
	mu     sync.Mutex
	lru    *simplelru.LRU[string, *leaseEntry]
	counts leaseCounts
}

// leaseCounts are one shard's LeaseStats counts, kept under its mutex so
// that the hot path does no atomic operation on a shared cache line.
type leaseCounts struct {
	local, localUnits, leases, leased, early, returned, stranded, refunds, ahead uint64
	returning                                                                    int // units in tails now
}

// leaseState is one lease: the units its round trip took, the decision's
// own first, and what the algorithm needs to report decisions from it and
// to give its tail back.
type leaseState struct {
	units  int   // units taken, the decision's included
	anchor int64 // local ns, read before the lease's round trip
	first  int64 // ns after anchor until which unit 0 may be allowed
	// snap is the algorithm's view of Redis right after the lease (token
	// bucket: owed µs and fraction; counter: prev, cur and now in µs).
	snap [3]int64
	// end identifies the lease to Redis when its tail is given back (token
	// bucket: the bucket's arrival time after it; counter: its window).
	endQ, endR int64
	times      leaseTimes // how the lease's units age, under its rate
	alg        any        // the rate the lease was taken under (*tbParams, *scParams)
}

// leaseEntry is one key's state in the table: the lease units are allowed
// from, and the next one, taken ahead of need, which takes over when the
// first cannot allow a request.
type leaseEntry struct {
	leaseState
	next  int // the next unit to allow; units before it are used or expired
	given int // units of this lease allowed (a local refund takes them back)
	// queued is the next lease; allocated for the keys that refresh early
	// (hot ones) and kept, so that a cold key costs less memory.
	queued    *leaseState
	hasQueued bool
	// rtt is the duration of the key's last round trip, in ns: the next
	// lease is taken when the current one holds less than the key spends
	// in about four.
	rtt int64
	// size is the units the last lease took in all, 0 for a new key; a
	// lease grows at most to twice the last one.
	size   int
	since  int64 // local ns since which demand was counted
	demand int64 // units asked for since then
	flight *leaseFlight
	// evicted is set when the entry leaves the table: a lease that lands
	// on it afterwards is lost.
	evicted bool
	// tail holds units of this key's leases that ended unused, never to
	// be allowed, until a round trip gives them back (keepTails).
	tail leaseTail
	// timer gives the tail back when the lease ends, if no round trip has
	// (leaseTable.ended); allocated at the key's first lease.
	timer *time.Timer
}

// leaseTail is units of ended leases of one window, waiting to go back
// to Redis.
type leaseTail struct {
	units int
	q     int64 // the window they were counted in (the lease's endQ)
	alg   any   // the rate they were leased under
}

// leaseFlight is a round trip in flight for a key: other callers of the
// key wait for it rather than send their own.
type leaseFlight struct {
	done   chan struct{}
	failed bool // the round trip failed: waiters decide on their own
	// denied: Redis denied n units at local time at, with d; waiters of
	// the same cost get that answer, aged.
	denied bool
	n      int
	d      floodgate.Decision
	at     int64
}

const leaseShards = 32

func newLeaseTable(cfg Lease, algo leaseAlgo, rate leaseRate) *leaseTable {
	n := leaseShards
	for n > 1 && n > cfg.MaxKeys {
		n /= 2
	}
	t := &leaseTable{cfg: cfg, algo: algo, seed: maphash.MakeSeed(),
		shards: make([]leaseShard, n), mask: uint64(n - 1)}
	t.rate.Store(&rate)
	per, extra := cfg.MaxKeys/n, cfg.MaxKeys%n
	for i := range t.shards {
		sh := &t.shards[i]
		size := per
		if i < extra {
			size++
		}
		// The callback runs under sh.mu, inside Add or Remove.
		sh.lru, _ = simplelru.NewLRU[string, *leaseEntry](size, func(_ string, e *leaseEntry) {
			e.evicted = true
			sh.counts.stranded += uint64(e.held() + e.tail.units)
			sh.counts.returning -= e.tail.units
			e.tail = leaseTail{}
			if e.timer != nil {
				e.timer.Stop()
			}
		})
	}
	return t
}

func (t *leaseTable) shard(key string) *leaseShard {
	return &t.shards[maphash.String(t.seed, key)&t.mask]
}

// entry returns key's entry, creating it at local time now.
func (sh *leaseShard) entry(key string, now int64) *leaseEntry {
	if e, ok := sh.lru.Get(key); ok {
		return e
	}
	e := &leaseEntry{since: now}
	// Clone: the key may be a slice of a request's memory.
	sh.lru.Add(strings.Clone(key), e)
	return e
}

// deadline returns the local time until which unit i of e's lease may be
// allowed.
func (t *leaseTable) deadline(e *leaseState, i int) int64 {
	off := e.first
	if e.times.stepNum != 0 && i > 0 {
		// i <= burst, so i·step <= tau < 2^60 ns: the quotient fits.
		hi, lo := bits.Mul64(uint64(i), e.times.stepNum)
		q, _ := bits.Div64(hi, lo, e.times.stepDen)
		off += int64(q)
	}
	if t.margin && off > 0 {
		off -= off >> 10
	}
	return e.anchor + off
}

// live returns the first unit of e's lease that may still be allowed at
// local time now (e.units if none).
func (t *leaseTable) live(e *leaseEntry, now int64) int {
	if e.next >= e.units || t.deadline(&e.leaseState, e.next) >= now {
		return e.next
	}
	return e.next + sort.Search(e.units-e.next, func(j int) bool {
		return t.deadline(&e.leaseState, e.next+j) >= now
	})
}

// held returns the units e holds, in both leases, whether or not their
// time has passed.
func (e *leaseEntry) held() int {
	h := e.units - e.next
	if e.hasQueued {
		h += e.queued.units
	}
	return h
}

// take allows n units of e's leases at local time now if they hold them,
// setting aside the units whose time has passed (drop). When the current
// lease cannot allow n, the queued one takes over, and the rest of the
// current one (fewer than n units) is set aside too.
func (sh *leaseShard) take(t *leaseTable, e *leaseEntry, n int, now int64) bool {
	if i := t.live(e, now); i > e.next {
		t.drop(sh, e, i-e.next)
		e.next = i
	}
	if e.units-e.next < n {
		if !e.hasQueued {
			return false
		}
		t.drop(sh, e, e.units-e.next)
		e.leaseState, e.next, e.given, e.hasQueued = *e.queued, 0, 0, false
		return sh.take(t, e, n, now)
	}
	e.next += n
	e.given += n
	sh.counts.local++
	sh.counts.localUnits += uint64(n)
	return true
}

// drop sets m units of e's current lease aside, never to be allowed:
// into its tail, to go back to Redis (keepTails), or stranded. A tail
// holds one window's units; an older one still waiting is stranded.
func (t *leaseTable) drop(sh *leaseShard, e *leaseEntry, m int) {
	if m <= 0 {
		return
	}
	if !t.keepTails {
		sh.counts.stranded += uint64(m)
		return
	}
	if e.tail.units > 0 && (e.tail.q != e.endQ || e.tail.alg != e.alg) {
		sh.counts.stranded += uint64(e.tail.units)
		sh.counts.returning -= e.tail.units
		e.tail.units = 0
	}
	e.tail = leaseTail{units: e.tail.units + m, q: e.endQ, alg: e.alg}
	sh.counts.returning += m
}

// leaseAction is what one pass of a decision does next.
type leaseAction int

const (
	leaseGranted leaseAction = iota // allowed from the lease
	leaseWait                       // wait for the key's round trip in flight
	leaseFetch                      // send the round trip
	leaseRefresh                    // allowed; now take the next lease
)

// leaseStep is the outcome of one pass under the shard lock.
type leaseStep struct {
	kind   leaseAction
	d      floodgate.Decision
	e      *leaseEntry
	flight *leaseFlight
	call   leaseCall
}

// step allows n units of key from its lease at local time now, or says
// whom to wait for, or plans the round trip this caller sends. first is
// false when the caller already waited, so that its demand counts once.
func (t *leaseTable) step(key string, n int, now int64, first bool) leaseStep {
	sh := t.shard(key)
	sh.mu.Lock()
	e := sh.entry(key, now)
	if first {
		e.demand += int64(n)
	}
	var s leaseStep
	var view leaseState // the lease the Decision is derived from, after the unlock
	left := 0
	switch {
	case sh.take(t, e, n, now):
		s.kind, view, left = leaseGranted, e.leaseState, e.units-e.next
		if e.hasQueued {
			view, left = *e.queued, left+e.queued.units
		}
		if e.flight == nil && !e.hasQueued && t.low(e, now) {
			s.kind, s.e, s.call = leaseRefresh, e, t.plan(e, 0, now, e.units-e.next)
			e.flight = &leaseFlight{done: make(chan struct{})}
			s.flight = e.flight
		}
	case e.flight != nil:
		s.kind, s.flight = leaseWait, e.flight
	default:
		// One round trip per key in flight, a plain one included: the
		// key's other callers wait for it, so that no decision of this
		// instance misses the units another one of its round trips leased.
		s.kind, s.e, s.call = leaseFetch, e, t.plan(e, n, now, 0)
		e.flight = &leaseFlight{done: make(chan struct{})}
		s.flight = e.flight
	}
	sh.mu.Unlock()
	if s.kind == leaseGranted || s.kind == leaseRefresh {
		s.d = t.algo.granted(view, left, now)
	}
	return s
}

// plan sizes the lease a round trip for n units asks for: the key's local
// demand over the horizon, at most twice the last lease or twice the
// units asked for since the last round trip (callers that waited for it
// say how much is needed now), at most maxUnits, at least n. A new key asks for n: one request says nothing of
// its rate. before is the units the key holds and will use first (an
// early refresh), for the algorithm to place the lease.
func (t *leaseTable) plan(e *leaseEntry, n int, now int64, before int) leaseCall {
	c := leaseCall{n: n, want: n, anchor: now, prefetch: n == 0, before: before}
	if e.size > 0 {
		rate := float64(e.demand) / float64(max(now-e.since, 1))
		grow := 2 * max(int64(e.size), e.demand)
		c.want = max(n, ceilWant(rate*t.horizonNs(), int(min(grow, int64(t.rate.Load().maxUnits)))))
		if c.want > n {
			t.algo.plan(e, &c, rate)
		}
	}
	e.since, e.demand = now, 0
	return c
}

// low reports whether e's current lease, which allowed a request at local
// time now, holds less than the key spends in about four round trips at
// its local rate: time to take the next lease. Leases of fewer than 8
// units (keys that are not hot) are not refreshed early.
func (t *leaseTable) low(e *leaseEntry, now int64) bool {
	if e.units < 8 {
		return false
	}
	left := e.units - e.next
	rate := float64(e.demand) / float64(max(now-e.since, 1))
	return float64(left) < min(rate*float64(4*e.rtt)+1, float64(e.units)/2)
}

// decision is the Decision of a request e allowed at local time now: from
// the newest lease's view of Redis, with every unit e still holds.
func (t *leaseTable) decision(e *leaseEntry, now int64) floodgate.Decision {
	left := e.units - e.next
	if e.hasQueued {
		return t.algo.granted(*e.queued, left+e.queued.units, now)
	}
	return t.algo.granted(e.leaseState, left, now)
}

// retire takes the unused tail of e's lease off it, for the round trip
// about to run to give back; no unit of it is allowed from then on. With
// keepTails the units set aside go too, and all are counted given back
// if Redis takes them. A give-back (c.giveBack) takes only those: the
// lease's live units stay.
func (t *leaseTable) retire(key string, e *leaseEntry, c *leaseCall) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m := e.units - e.next; m > 0 && !c.giveBack {
		c.retUnits, c.retLive = m, e.units-t.live(e, c.anchor)
		c.retQ, c.retR, c.retAlg = e.endQ, e.endR, e.alg
		e.units = e.next
		if t.keepTails {
			c.retLive = m
		}
	}
	if e.tail.units == 0 {
		return
	}
	switch {
	case c.retUnits == 0:
		c.retUnits, c.retLive, c.retQ, c.retR, c.retAlg = e.tail.units, e.tail.units, e.tail.q, 0, e.tail.alg
	case c.retQ == e.tail.q && c.retAlg == e.tail.alg:
		c.retUnits += e.tail.units
		c.retLive += e.tail.units
	default:
		sh.counts.stranded += uint64(e.tail.units)
	}
	sh.counts.returning -= e.tail.units
	e.tail = leaseTail{}
}

// finish records the round trip's outcome in e, installs the new lease,
// and wakes the waiters. d is the decision; c.ran says whether it came from
// the script (not the deny cache or the fallback). end is the local time
// the round trip returned.
func (t *leaseTable) finish(key string, e *leaseEntry, f *leaseFlight, c *leaseCall, d floodgate.Decision, end int64) {
	sh := t.shard(key)
	sh.mu.Lock()
	sh.countReturn(c)
	if c.ran {
		e.rtt = max(end-c.anchor, 0)
	}
	switch {
	case c.giveBack:
		// Nothing leased: the tail went back, or is stranded.
	case c.failed:
		// Whatever the script did is lost or unusable: start small again,
		// as after a denial.
		e.size, e.demand = min(e.size, max(c.n, 1)), 0
	case !c.ran:
	case c.prefetch:
		e.size = max(c.got, 1)
		if c.got > 0 {
			sh.counts.leases++
			sh.counts.early++
			sh.counts.leased += uint64(c.got)
			if e.evicted {
				sh.counts.stranded += uint64(c.got)
			} else {
				if e.queued == nil {
					e.queued = new(leaseState)
				}
				*e.queued, e.hasQueued = c.next, true
			}
		}
	case d.Allowed:
		e.size = c.got
		sh.counts.ahead += uint64(c.ahead)
		if extra := c.got - c.n; extra > 0 {
			sh.counts.leases++
			sh.counts.leased += uint64(extra)
			if e.evicted {
				sh.counts.stranded += uint64(extra)
			} else {
				// Units a local refund put back after the tail was taken.
				t.drop(sh, e, e.units-e.next)
				e.leaseState = c.next
				e.next, e.given = c.n, c.n
			}
		}
	default:
		e.size = c.n
		f.denied, f.n, f.d, f.at = true, c.n, d, c.anchor
	}
	f.failed = c.failed
	e.flight = nil
	t.arm(key, e, end)
	sh.mu.Unlock()
	close(f.done)
}

// arm sets e's timer (leaseTable.ended) to give its tail back when its
// next lease ends — the current one, or the queued one when the current
// holds nothing — plus a grace of four round trips (at least 1 ms, at
// most Horizon) in which a decision's round trip would give it back at
// no cost. Without a lease left it does nothing: a tail whose give-back
// could not be sent (Redis down) waits for the key's next round trip, so
// that an outage costs no timer loop. now is local time; sh.mu is held.
func (t *leaseTable) arm(key string, e *leaseEntry, now int64) {
	if t.ended == nil || e.evicted {
		return
	}
	var at int64
	switch {
	case e.units > e.next:
		at = t.deadline(&e.leaseState, e.units-1)
	case e.hasQueued && e.queued.units > 0:
		at = t.deadline(e.queued, e.queued.units-1)
	default:
		return
	}
	d := time.Duration(max(at-now, 0)) + min(t.cfg.Horizon, time.Duration(4*e.rtt)+time.Millisecond)
	if e.timer == nil {
		k := strings.Clone(key) // the caller's key may be a request's memory
		e.timer = time.AfterFunc(d, func() { t.ended(k, e) })
		return
	}
	e.timer.Reset(d)
}

// ending readies e, whose timer fired at local time now, to give back
// what its ended leases left: it sets aside the units whose time passed,
// lets the queued lease take over from a spent one, and re-arms the
// timer for the next end. It returns the round trip to send, with its
// flight, or ok false when there is nothing to give back, or a round
// trip of the key's is in flight (a decision's takes the tail along; an
// early refresh's does not, and the timer tries again after it).
func (t *leaseTable) ending(key string, e *leaseEntry, now int64) (f *leaseFlight, c leaseCall, ok bool) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur, in := sh.lru.Peek(key); !in || cur != e {
		return nil, c, false
	}
	for {
		if i := t.live(e, now); i > e.next {
			t.drop(sh, e, i-e.next)
			e.next = i
		}
		if e.next < e.units || !e.hasQueued {
			break
		}
		e.leaseState, e.next, e.given, e.hasQueued = *e.queued, 0, 0, false
	}
	if e.tail.units == 0 || e.flight != nil {
		if e.flight == nil || e.tail.units == 0 {
			t.arm(key, e, now)
		} else if e.timer != nil {
			e.timer.Reset(min(t.cfg.Horizon, time.Duration(4*e.rtt)+time.Millisecond))
		}
		return nil, c, false
	}
	e.flight = &leaseFlight{done: make(chan struct{})}
	return e.flight, leaseCall{anchor: now, giveBack: true}, true
}

// countReturn counts the tail c gave back (or failed to).
func (sh *leaseShard) countReturn(c *leaseCall) {
	switch {
	case c.retUnits == 0:
	case c.returned > 0:
		back := min(c.returned, c.retLive)
		sh.counts.returned += uint64(back)
		sh.counts.stranded += uint64(c.retUnits - back)
	default:
		sh.counts.stranded += uint64(c.retUnits)
	}
}

// reuse returns the denial f got, aged to local time now, for a waiter
// asking for n units: the same request cannot fit before its RetryAfter,
// since others can only take more meanwhile (the deny cache's reasoning).
func (f *leaseFlight) reuse(n int, now int64) (floodgate.Decision, bool) {
	age := max(now-f.at, 0)
	if !f.denied || f.n != n || int64(f.d.RetryAfter) <= age {
		return floodgate.Decision{}, false
	}
	d := f.d
	d.RetryAfter -= time.Duration(age)
	d.ResetAfter = max(d.ResetAfter-time.Duration(age), 0)
	return d, true
}

// report answers a report (n == 0) from key's lease while it holds units,
// without a round trip.
func (t *leaseTable) report(key string, now int64) (floodgate.Decision, bool) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.lru.Peek(key)
	if !ok {
		return floodgate.Decision{}, false
	}
	if i := t.live(e, now); i > e.next {
		t.drop(sh, e, i-e.next)
		e.next = i
	}
	if e.next >= e.units && !e.hasQueued {
		return floodgate.Decision{}, false
	}
	return t.decision(e, now), true
}

// giveBack returns n units to key's lease, for RefundN: units this lease
// allowed, still within their time, while no next lease is queued (so
// that a key's held units stay within a lease and half). It reports
// whether it could.
func (t *leaseTable) giveBack(key string, n int, now int64) bool {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.lru.Peek(key)
	if !ok || e.hasQueued || e.given < n || t.deadline(&e.leaseState, e.next-n) < now {
		return false
	}
	e.next -= n
	e.given -= n
	sh.counts.refunds += uint64(n)
	return true
}

// reconfigure makes r the rate new leases are taken under, and drops
// every lease taken under the one before (their units stay charged in
// Redis, as used, and are never allowed: stranded), so that no unit
// leased under an old rate is allowed once this instance decides under a
// new one.
func (t *leaseTable) reconfigure(r leaseRate) {
	t.rate.Store(&r)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.lru.Purge()
		sh.mu.Unlock()
	}
}

// forget drops key's entry (Reset): its unused units are stranded.
func (t *leaseTable) forget(key string) {
	sh := t.shard(key)
	sh.mu.Lock()
	sh.lru.Remove(key)
	sh.mu.Unlock()
}

// stats sums the shards' counts.
func (t *leaseTable) stats() LeaseStats {
	s := LeaseStats{MaxKeys: t.cfg.MaxKeys}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		c := sh.counts
		s.Keys += sh.lru.Len()
		sh.mu.Unlock()
		s.LocalDecisions += c.local
		s.LocalUnits += c.localUnits
		s.Leases += c.leases
		s.LeasedUnits += c.leased
		s.EarlyLeases += c.early
		s.ReturnedUnits += c.returned
		s.StrandedUnits += c.stranded
		s.LocalRefunds += c.refunds
		s.AheadUnits += c.ahead
		s.ReturningUnits += c.returning
	}
	return s
}
