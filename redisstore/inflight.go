package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
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
// them every lease/3, in one round trip per key however many of its calls
// hold them, so a lease survives two failed renewals.
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
	//go:embed scripts/inflight.lua
	inFlightSrc string
	//go:embed scripts/inflight_release.lua
	inFlightReleaseSrc string

	inFlightScript        = newScript(prelude + inFlightSrc)
	inFlightReleaseScript = newScript(prelude + inFlightReleaseSrc)
)

// InFlight is an in-flight (concurrency) limit on Redis: at most Max
// units held at once per key (NewInFlight), or by every key together
// (NewServiceInFlight), across every instance of a service — what
// floodgate.InFlight is in memory, with the same decisions. The
// admission core takes a call's slots when it is allowed and releases
// them when it settles, also when its handler panics or its client hangs
// up.
//
// A slot on Redis is a lease: each instance holds the slots of its calls
// under one holder record per key, which it renews while it holds any
// (WithSlotLease, default 30 s), so that a crashed instance cannot hold slots
// forever — they come back within a lease. See WithSlotLease for what a
// lease too short or too long costs. A call whose decision round trip
// failed or was abandoned (its client hung up meanwhile) may have taken
// a slot it never settles; that slot is not renewed, and comes back
// within a lease too.
//
// State: one hash per key, p:{k}:if (p:{%}:if service-wide), holder →
// "slots expiry"; a decision is one round trip whose work grows with the
// number of instances holding slots of that key (at most Max), and the
// key vanishes with its last lease. Time is the server's TIME unless
// WithClock.
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
	holder      string // this instance's holder record
	slotLease   time.Duration
	leaseArg    string // the slot lease in microseconds
	maxArg      string
	hold        holdTime
	lost        atomic.Uint64

	mu     sync.Mutex
	held   map[string]*leased // the keys this instance holds slots of
	closed bool
}

// leased is what this instance holds of one key.
type leased struct {
	slots   int         // held by calls not yet released
	pending int         // released here, not yet on Redis (a release failed)
	timer   *time.Timer // the next renewal
}

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

// AllowN takes n slots for key if its holders hold no more than Max−n,
// and reports the decision either way; n == 0 reports without taking. A
// cost above Max is floodgate.ErrCostExceedsLimit, without a round trip.
// Errors of the round trip wrap ErrRedis.
func (l *InFlight) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if err := checkCost(n, l.max); err != nil {
		return floodgate.Decision{Limit: l.max}, err
	}
	if l.serviceWide {
		key = ""
	}
	d, err := l.decide(ctx, key, n, l.eval)
	if err == nil && d.Allowed && n > 0 {
		l.took(key, n)
	}
	return d, err
}

func (l *InFlight) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	args := []string{now, l.holder, strconv.Itoa(n), l.maxArg, l.leaseArg, l.minTTL}
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

// Namespace reports where the limit keeps its holders, the pattern of its
// keys (`redis keys "p:{*}:if"`), as TokenBucket.Namespace does: two
// in-flight limits of one prefix, keyed or service-wide, are refused
// together by floodgate's selectors, route tables and All. It makes the
// limit a floodgate.Namespacer.
func (l *InFlight) Namespace() string { return keySpace(l.slotsKey("*")) }

// slotsKey returns the hash of key's holders.
func (l *InFlight) slotsKey(key string) string {
	return clientTag(l.prefix, key) + "if"
}

// took records n slots this instance now holds of key, and starts their
// renewals.
func (l *InFlight) took(key string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.held[key]
	if e == nil {
		e = &leased{}
		l.held[key] = e
		if !l.closed {
			e.timer = time.AfterFunc(l.slotLease/3, func() { l.renew(key) })
		}
	}
	e.slots += n
}

// ReleaseN gives back n slots that an allowed AllowN took for key, after
// holding them for held (0: unknown). If the round trip fails, the slots
// are given back with the key's next renewal, or, failing that, when the
// lease runs out: the error wraps ErrRedis all the same.
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
	n = min(n, e.slots)
	e.slots -= n
	e.pending += n
	l.mu.Unlock()
	return l.sync(ctx, key)
}

// sync gives back on Redis what was released here, and renews the lease
// of what this instance still holds of key; it forgets the key once
// nothing of it is held or owed.
func (l *InFlight) sync(ctx context.Context, key string) error {
	l.mu.Lock()
	e := l.held[key]
	if e == nil {
		l.mu.Unlock()
		return nil
	}
	give, slots := e.pending, e.slots
	e.pending = 0
	l.mu.Unlock()
	var left int64
	err := l.refund(ctx, key, func(ctx context.Context, now string) error {
		r, err := inFlightReleaseScript.run(ctx, l.client, []string{l.slotsKey(key)},
			[]string{now, l.holder, strconv.Itoa(give), l.leaseArg, l.minTTL})
		if err == nil && len(r) == 1 {
			left = r[0]
		}
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		e.pending += give
	} else if left == 0 && slots > 0 {
		l.lost.Add(1) // the lease ran out under calls still running
	}
	if e.slots == 0 && e.pending == 0 && l.held[key] == e {
		if e.timer != nil {
			e.timer.Stop()
		}
		delete(l.held, key)
	}
	return err
}

// renew renews key's lease, and schedules the next renewal while the key
// is held.
func (l *InFlight) renew(key string) {
	_ = l.sync(context.Background(), key) // a failure is retried at the next renewal
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.held[key]; e != nil && !l.closed {
		e.timer.Reset(l.slotLease / 3)
	}
}

// LostLeases counts the renewals that found this instance's slots of a
// key gone while its calls still held them: the lease ran out first (a
// lease too short for the round trips, or Redis unreachable for a
// lease), and other instances may have taken those slots.
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
