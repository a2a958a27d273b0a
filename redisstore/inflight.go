package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// DefaultSlotLease is how long an in-flight slot stays taken on Redis after
// its holder stopped renewing it, unless WithSlotLease says otherwise.
const DefaultSlotLease = 30 * time.Second

// WithSlotLease sets the lease of an in-flight limit's slots (default
// DefaultSlotLease): how long the slots an instance holds stay taken once it
// stops renewing them — it crashed, lost its network, or was stopped
// without releasing. While an instance holds slots of a key it renews
// its calls' leases every lease/3 (counted from the start of the renewal
// before, however long its round trip took), in one round trip per key
// however many of its calls hold slots there, so a lease survives two
// failed renewals.
//
// What a lease costs either way: a crashed instance's slots are lost to
// everyone for up to a lease (a longer lease under-admits for longer); a
// lease too short for the round trips — renewals that come late, a GC
// pause, Redis slow or unreachable for a third of it — lets the slots of
// calls still running expire, and other instances may then take them:
// more than the limit in flight, for the rest of those calls
// (InFlight.LostLeases counts it). It must be at least 3 × WithTimeout
// and at least 30 ms; it applies only to NewInFlight and
// NewServiceInFlight.
func WithSlotLease(d time.Duration) Option {
	return func(c *config) error {
		if d < 30*time.Millisecond || d%time.Microsecond != 0 || d/time.Microsecond >= maxHorizon {
			return fmt.Errorf("%w: lease %s must be at least 30ms, whole microseconds, below 2^50 us", floodgate.ErrInvalidOption, d)
		}
		c.slotLease = d
		return c.once("WithSlotLease")
	}
}

var (
	//go:embed scripts/inflight_prelude.lua
	inFlightPrelude string
	//go:embed scripts/inflight.lua
	inFlightSrc string
	//go:embed scripts/inflight_sync.lua
	inFlightSyncSrc string

	inFlightScript     = newScript(prelude + inFlightPrelude + inFlightSrc)
	inFlightSyncScript = newScript(prelude + inFlightPrelude + inFlightSyncSrc)
)

// maxAbandoned bounds the decisions given up on that one key keeps to
// give back at its next round trip; beyond it, their leases give their
// slots back.
const maxAbandoned = 1024

// InFlight is an in-flight (concurrency) limit on Redis: at most Max
// units held at once per key (NewInFlight), or by every key together
// (NewServiceInFlight), across every instance of a service — what
// floodgate.InFlight is in memory, with the same decisions. The
// admission core takes a call's slots when it is allowed and releases
// them when it settles, also when its handler panics or its client hangs
// up.
//
// A slot on Redis is a lease: each call's slots are a record of their
// own on Redis, under an id the instance drew for the call, with a lease
// of their own (WithSlotLease, default 30 s). The instance renews, every
// third of a lease, the records of the calls it knows it holds — one
// round trip per key however many of its calls hold slots there — so a
// crashed instance's slots come back within a lease, and so does any
// slot no live call of the instance knows of. See WithSlotLease for what
// a lease too short or too long costs.
//
// A decision the instance gave up on — its round trip failed, its reply
// came after the decision timeout, or its caller hung up meanwhile — may
// have taken a slot that no call will release: the instance gives back
// that call's record at once (in the background, with the key's next
// round trip), and a record its script wrote only afterwards (a take
// overtaken by its own release) is never renewed, so its slot comes
// back within a lease, whatever else the instance holds of the key. A
// client that hangs up mid-decision again and again holds a slot for a
// round trip each time, a lease at most, and never for good.
//
// State: one sorted set per key, p:{k}:if (p:{%}:if service-wide): a
// member per call, "<call> <n>", scored by its lease's expiry, and the
// units held. A decision is one round trip of bounded work — a lookup, a
// read of the expired records (at most 100 forgotten each time) and two
// writes — whatever Max and the calls held; a release is one round trip
// too; a renewal's work grows with the calls the instance holds of the
// key. The key vanishes with its last lease. Time is the server's TIME
// unless WithClock.
//
// A denial's RetryAfter is the estimate floodgate.InFlight gives: this
// instance's mean hold time divided by the slots the key holds, at least
// a millisecond (1 s before any release). A service-wide denial is
// Decision.Overloaded (HTTP 503). It takes WithPrefix, WithClock,
// WithTimeout, WithMaxKeyLength and WithSlotLease; a fallback and a deny
// cache do not apply (a slot taken in one place must be given back
// there). Close stops the renewals.
//
// An InFlight is safe for concurrent use.
type InFlight struct {
	base
	max         int
	serviceWide bool
	holder      string // this instance's id, which begins its calls' ids
	slotLease   time.Duration
	leaseArg    string // the slot lease in microseconds
	maxArg      string
	hold        holdTime
	lost        atomic.Uint64
	calls       atomic.Uint64 // numbers this instance's calls

	mu     sync.Mutex
	held   map[string]*leased // the keys this instance holds slots of, or owes Redis
	closed bool
}

// slotCall is the slots one call holds of a key, as its record on Redis
// has them.
type slotCall struct {
	member string // its record: "<call> <n>"
	n      int
	// lost: a renewal found the record gone (its lease ran out), so Redis
	// no longer counts these slots; they are given back first.
	lost bool
}

// leased is what this instance holds of one key, and what it owes Redis
// there.
type leased struct {
	calls []slotCall
	// release holds the records of calls released here, to delete;
	// remove the records to delete that may be gone already: decisions
	// given up on, releases a failed round trip may or may not have made.
	release, remove []string
	// shrink holds pairs of records: a call released in part, its record
	// then and now.
	shrink []string
	lost   int         // calls lost (slotCall.lost)
	timer  *time.Timer // the next renewal, or a give-back due at once
	due    time.Time   // when the next renewal is due
}

func (e *leased) idle() bool { return len(e.calls) == 0 && e.owed() == 0 }

// owed returns the records this instance owes Redis a write of.
func (e *leased) owed() int { return len(e.release) + len(e.remove) + len(e.shrink) }

// NewInFlight returns an in-flight limit of max units held at once per
// key, in 1..2^24, on Redis through c.
func NewInFlight(c Scripter, max int, opts ...Option) (*InFlight, error) {
	return newInFlight(c, max, false, opts)
}

// NewServiceInFlight returns an in-flight limit of max units held at once
// by every key together: a cap on the calls the whole service, every
// instance, runs at once. Its denials are marked Decision.Overloaded; the
// key is ignored.
func NewServiceInFlight(c Scripter, max int, opts ...Option) (*InFlight, error) {
	return newInFlight(c, max, true, opts)
}

func newInFlight(c Scripter, limit int, serviceWide bool, opts []Option) (*InFlight, error) {
	if limit <= 0 || limit > maxLimit {
		return nil, fmt.Errorf("%w: in-flight limit %d must be in 1..%d", floodgate.ErrInvalidOption, limit, maxLimit)
	}
	cfg, err := newConfig(kindInFlight, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.fallback != nil, cfg.denyCache > 0:
		return nil, fmt.Errorf("%w: WithFallback and WithDenyCache do not apply to an %s: its slots are given back where they were taken", floodgate.ErrInvalidOption, kindInFlight)
	case cfg.slotLease < 3*cfg.timeout:
		return nil, fmt.Errorf("%w: lease %s is shorter than three round trips' timeout (%s): renewals would come late", floodgate.ErrInvalidOption, cfg.slotLease, 3*cfg.timeout)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("redisstore: a holder id: %w", err)
	}
	l := &InFlight{max: limit, serviceWide: serviceWide, holder: hex.EncodeToString(id[:]), slotLease: cfg.slotLease,
		leaseArg: strconv.FormatInt(int64(cfg.slotLease/time.Microsecond), 10), maxArg: strconv.Itoa(limit),
		held: make(map[string]*leased)}
	if err := l.init(c, cfg); err != nil {
		return nil, err
	}
	l.fixedLimit = limit
	return l, nil
}

// Max returns the most units a key (or the service) may hold at once.
func (l *InFlight) Max() int { return l.max }

// ServiceWide reports whether the limit is one for the whole service,
// which ignores keys.
func (l *InFlight) ServiceWide() bool { return l.serviceWide }

// Allow is AllowN(ctx, key, 1).
func (l *InFlight) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN takes n slots for key if its calls hold no more than Max−n, and
// reports the decision either way; n == 0 reports without taking. A
// cost above Max is floodgate.ErrCostExceedsLimit, without a round trip.
// Errors of the round trip wrap ErrRedis; the slots such a decision may
// have taken are given back (see InFlight).
func (l *InFlight) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if err := checkCost(n, l.max); err != nil {
		return floodgate.Decision{Limit: l.max}, err
	}
	if l.serviceWide {
		key = ""
	}
	t := &slotTake{l: l}
	if n > 0 {
		t.member = l.newCall(n)
	}
	d, err := l.decide(ctx, key, n, t.eval)
	switch {
	case n == 0:
	case err == nil && d.Allowed:
		l.took(key, t.member, n)
	case err != nil && t.sent:
		// Whatever Redis did is unknown, or unusable: a reply that came
		// too late, or not at all, a caller gone, writes the replicas did
		// not acknowledge. No one will release the call: give its record
		// back now.
		l.abandon(key, t.member)
	}
	return d, err
}

// slotTake is one decision's round trip: the call's record, and whether
// the script was sent (its slot may then be taken).
type slotTake struct {
	l      *InFlight
	member string
	sent   bool
}

func (t *slotTake) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	t.sent = true
	l := t.l
	args := []string{now, t.member, strconv.Itoa(n), l.maxArg, l.leaseArg, l.minTTL}
	r, unrepl, err := l.reply(ctx, inFlightScript, []string{l.slotsKey(key)}, args, 2)
	if err != nil {
		return floodgate.Decision{Limit: l.max}, err
	}
	if r[1] < 0 || r[1] > int64(maxLimit) {
		return floodgate.Decision{Limit: l.max}, errBadReply(r)
	}
	held := int(r[1])
	d := floodgate.Decision{Allowed: r[0] == 1, Limit: l.max, Remaining: max(l.max-held, 0)}
	if held > 0 {
		d.ResetAfter = l.hold.mean()
	}
	if !d.Allowed {
		d.RetryAfter = max(l.hold.mean()/time.Duration(max(held, 1)), time.Millisecond)
		d.Overloaded = l.serviceWide
	}
	return d, replicated(d, n, unrepl)
}

// newCall returns the record of a new call of n units: this instance's
// id, the call's number, and n.
func (l *InFlight) newCall(n int) string {
	b := make([]byte, 0, len(l.holder)+24)
	b = append(b, l.holder...)
	b = append(b, '.')
	b = strconv.AppendUint(b, l.calls.Add(1), 36)
	b = append(b, ' ')
	return string(strconv.AppendInt(b, int64(n), 10))
}

// Namespace reports where the limit keeps its slots, the pattern of its
// keys (`redis keys "p:{*}:if"`), as TokenBucket.Namespace does: two
// in-flight limits of one prefix, keyed or service-wide, are refused
// together by floodgate's selectors, route tables and All. It makes the
// limit a floodgate.Namespacer.
func (l *InFlight) Namespace() string { return keySpace(l.slotsKey("*")) }

// slotsKey returns the sorted set of key's slots.
func (l *InFlight) slotsKey(key string) string {
	return clientKey(l.prefix, key, "if")
}

// entry returns key's entry, creating it with its renewal timer. l.mu
// is held.
func (l *InFlight) entry(key string) *leased {
	e := l.held[key]
	if e == nil {
		e = &leased{due: time.Now().Add(l.slotLease / 3)}
		l.held[key] = e
		if !l.closed {
			e.timer = time.AfterFunc(l.slotLease/3, func() { l.renew(key, false) })
		}
	}
	return e
}

// took records the call whose record is member, of n slots, which this
// instance now holds of key: it is renewed from now on.
func (l *InFlight) took(key, member string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key)
	e.calls = append(e.calls, slotCall{member: member, n: n})
}

// abandon gives back, at once and in the background, the record member
// of a decision given up on, if its script wrote it. A record written
// after that is never renewed: its lease gives the slot back.
func (l *InFlight) abandon(key, member string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	e := l.entry(key)
	if len(e.remove) < maxAbandoned {
		e.remove = append(e.remove, member)
	}
	e.timer.Reset(0)
}

// ReleaseN gives back n slots that an allowed AllowN took for key, after
// holding them for held (0: unknown). If the round trip fails, the slots
// are given back with the key's next renewal, or, failing that, when
// their lease runs out: the error wraps ErrRedis all the same.
func (l *InFlight) ReleaseN(ctx context.Context, key string, n int, held time.Duration) error {
	if n < 0 {
		return fmt.Errorf("%w: release of n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if held > 0 {
		l.hold.observe(held)
	}
	if l.serviceWide {
		key = ""
	}
	if err := l.checkKey(key); err != nil || n == 0 {
		return err
	}
	l.mu.Lock()
	e := l.held[key]
	if e == nil { // not taken here, or long released: nothing to give back
		l.mu.Unlock()
		return nil
	}
	owed := e.owed()
	for n > 0 && len(e.calls) > 0 {
		n = e.give(e.pick(n), n)
	}
	owed = e.owed() - owed
	if e.idle() {
		l.forget(key, e)
	}
	l.mu.Unlock()
	if owed == 0 {
		return nil
	}
	return l.sync(ctx, key, false)
}

// pick returns the call to release n units of first: a lost one, whose
// slots Redis no longer counts; else one of exactly n units (units are
// alike, any call's do); else the latest.
func (e *leased) pick(n int) int {
	if e.lost > 0 {
		for i := range e.calls {
			if e.calls[i].lost {
				return i
			}
		}
	}
	for i := len(e.calls) - 1; i >= 0; i-- {
		if e.calls[i].n == n {
			return i
		}
	}
	return len(e.calls) - 1
}

// give gives back up to n units of call i, and returns the units left
// to give back.
func (e *leased) give(i, n int) int {
	c := &e.calls[i]
	if c.n > n {
		id := c.member[:strings.LastIndexByte(c.member, ' ')]
		next := id + " " + strconv.Itoa(c.n-n)
		if !c.lost {
			e.shrink = append(e.shrink, c.member, next)
		}
		c.member, c.n = next, c.n-n
		return 0
	}
	if c.lost {
		e.lost--
	} else {
		e.release = append(e.release, c.member)
	}
	n -= c.n
	last := len(e.calls) - 1
	e.calls[i] = e.calls[last]
	e.calls = e.calls[:last]
	return n
}

// forget drops key's entry e, which holds and owes nothing. l.mu is held.
func (l *InFlight) forget(key string, e *leased) {
	if l.held[key] != e {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(l.held, key)
}

// sync gives back on Redis what this instance owes there of key
// (releases, decisions given up on), and with renew set renews the
// leases of the calls it holds; it forgets the key once nothing of it is
// held or owed. What a failed round trip should have given back is kept
// for the next one. A renewal or a release that finds a call's record
// gone counts a lost lease.
func (l *InFlight) sync(ctx context.Context, key string, renew bool) error {
	l.mu.Lock()
	e := l.held[key]
	if e == nil {
		l.mu.Unlock()
		return nil
	}
	var renewed []string
	if renew {
		renewed = make([]string, 0, len(e.calls))
		for _, c := range e.calls {
			if !c.lost {
				renewed = append(renewed, c.member)
			}
		}
	}
	release, remove, shrink := e.release, e.remove, e.shrink
	e.release, e.remove, e.shrink = nil, nil, nil
	l.mu.Unlock()
	args := make([]string, 0, 6+len(renewed)+len(release)+len(remove)+len(shrink))
	args = append(args, "", l.leaseArg, l.minTTL, strconv.Itoa(len(renewed)), strconv.Itoa(len(release)), strconv.Itoa(len(remove)))
	args = append(append(append(append(args, renewed...), release...), remove...), shrink...)
	var r []int64
	err := l.refund(ctx, key, func(ctx context.Context, now string) error {
		args[0] = now
		var err error
		r, err = inFlightSyncScript.run(ctx, l.client, []string{l.slotsKey(key)}, args)
		if err == nil && (len(r) < 2 || r[1] < 0 || r[1] > int64(len(release))) {
			err = errBadReply(r)
		}
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if !l.closed {
			// The round trip may have made them: retried as records that
			// may be gone.
			e = l.entry(key)
			e.remove = append(append(e.remove, release...), remove...)
			e.shrink = append(shrink, e.shrink...) // a call shrunk twice, in order
		}
		return err
	}
	l.lost.Add(uint64(r[1]))
	for _, i := range r[2:] {
		if i >= 1 && int(i) <= len(renewed) {
			e.lose(renewed[i-1], &l.lost)
		}
	}
	if e.idle() {
		l.forget(key, e)
	}
	return nil
}

// lose marks the call whose record is member lost: its lease ran out
// while the call still held it.
func (e *leased) lose(member string, lost *atomic.Uint64) {
	for i := range e.calls {
		if c := &e.calls[i]; c.member == member && !c.lost {
			c.lost = true
			e.lost++
			lost.Add(1)
			return
		}
	}
}

// renew gives back what is owed on key and, when the renewal is due (or
// now, with force), renews the leases of the calls held there; then it
// schedules the next run while the key is held: at once if a decision
// was given up on meanwhile, else when the renewal is due — a third of a
// lease after the last one began, however long its round trip took, so
// that a lease survives two failed renewals. A give-back alone renews
// nothing, so that decisions given up on cost a round trip of their own
// size, not of the calls the key holds.
func (l *InFlight) renew(key string, force bool) {
	began := time.Now()
	l.mu.Lock()
	e := l.held[key]
	renewing := e != nil && (force || !began.Before(e.due))
	l.mu.Unlock()
	err := l.sync(context.Background(), key, renewing)
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.held[key]; e != nil && e.timer != nil && !l.closed {
		if renewing {
			e.due = began.Add(l.slotLease / 3)
		}
		next := time.Until(e.due)
		if err == nil && e.owed() > 0 {
			next = 0
		}
		e.timer.Reset(max(next, 0))
	}
}

// LostLeases counts the calls whose slots a renewal or their release
// found gone while the calls still held them: their lease ran out first (a lease too short
// for the round trips, or Redis unreachable for a lease), and other
// instances may have taken those slots.
func (l *InFlight) LostLeases() uint64 { return l.lost.Load() }

// Close stops renewing: the slots this instance still holds stay taken
// until their lease runs out, as if it had crashed, unless its calls
// release them first. Call it when the instance shuts down after its
// calls have ended; a limiter is not used after Close.
func (l *InFlight) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, e := range l.held {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	return nil
}

// Stats reports the limiter's failed round trips.
func (l *InFlight) Stats() Stats { return l.stats() }

// holdTime is an exponentially weighted mean of how long calls held their
// slots, as floodgate.InFlight keeps it: each observation moves it by an
// eighth of its distance.
type holdTime struct {
	ns atomic.Int64 // 0: nothing observed yet
}

func (h *holdTime) observe(d time.Duration) {
	for {
		old := h.ns.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if h.ns.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

func (h *holdTime) mean() time.Duration {
	if ns := h.ns.Load(); ns > 0 {
		return time.Duration(ns)
	}
	return time.Second
}

var (
	_ floodgate.Limiter    = (*InFlight)(nil)
	_ floodgate.Releaser   = (*InFlight)(nil)
	_ floodgate.Capacitor  = (*InFlight)(nil)
	_ floodgate.Namespacer = (*InFlight)(nil)
)
