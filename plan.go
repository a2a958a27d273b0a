package floodgate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// Plan is the quota of a key: the rate it is limited at and, for a token
// bucket, its burst. A PlanResolver returns it, from the customer's plan
// in a database, say.
type Plan struct {
	// Name names the plan, for errors and logs ("free", "pro").
	Name string
	// Rate is the plan's rate, valid as for the limiter's constructor.
	Rate Rate
	// Burst is a token bucket's capacity; 0 means Rate.Limit. A window
	// limiter has none: leave it 0.
	Burst int
	// Key is the identity the key counts under: its limit's state is
	// kept under Key, so that every key whose plan has the same Key
	// shares one quota. Empty means the key itself. Set it whenever the
	// resolver finds a key by anything looser than its exact bytes (a
	// database collation that folds case or ignores trailing spaces, a
	// normalised form) to the form it found, the stored API key or the
	// customer's ID: otherwise every spelling that finds the same row
	// gets a quota of its own. It also lets several API keys of one
	// customer share the customer's quota. A key whose Key changes
	// counts under the new one from its next lookup on.
	Key string
}

// PlanResolver returns the plan of key, within ctx's deadline (see
// PlanConfig.LookupTimeout). It returns ErrNoPlan for a key that has
// none (an unknown API key): the PlanLimiter then fails the decision
// with that error, the client's own doing (400 under every error policy,
// fail-open included), which PlanLimiter.KnownKey turns into ErrNoKey so
// that a PolicySelector tries its next policy. Any other error fails
// the decision too (ErrPlanLookup) unless the key has a plan from an
// earlier lookup (see PlanConfig.MaxStale), and the middleware's error
// policy answers it: fail closed (503) unless you chose otherwise. A
// lookup that runs out of time (PlanConfig.LookupTimeout) is not such an
// outage: it is refused as Overloaded under every policy. A failed
// lookup never falls to a default or lenient plan.
//
// The resolver runs on a goroutine of its own, so that its deadline
// holds whatever it does; one that ignores ctx is abandoned at the
// deadline, and its answer, when it comes, is cached as any other.
type PlanResolver func(ctx context.Context, key string) (Plan, error)

// Errors of a PlanLimiter.
var (
	// ErrNoPlan is returned by a PlanResolver for a key that has no plan.
	ErrNoPlan = errors.New("floodgate: the key has no plan")
	// ErrPlanLookup is wrapped by the error of a decision whose key's
	// plan could not be found: the resolver failed or ran out of time,
	// and the key has no plan from an earlier lookup to use meanwhile.
	// A lookup refused for capacity is no such error: see
	// PlanConfig.MaxLookups.
	ErrPlanLookup = errors.New("floodgate: the key's plan could not be looked up")
)

// Defaults of PlanConfig.
const (
	DefaultPlanCacheSize     = 1 << 16
	DefaultPlanCacheTTL      = time.Minute
	DefaultPlanMaxStale      = 10 * time.Minute
	DefaultPlanLookupTimeout = 100 * time.Millisecond
	DefaultPlanMaxLookups    = 64
	DefaultMaxPlans          = 64
)

// PlanConfig configures a PlanLimiter (NewPlanLimiter).
type PlanConfig struct {
	// Resolve returns a key's plan. Required.
	Resolve PlanResolver
	// New builds the limiter of a plan, once per distinct plan (rate and
	// burst) that has none, the first time a key on it is decided: in
	// memory (TokenBucketPlans and friends), or on Redis (every plan's
	// limiter on one prefix, and every plan of one Period: see
	// PlanLimiter). All of one algorithm. Required.
	New func(Plan) (Limiter, error)
	// CacheSize bounds the keys whose plan is kept (default
	// DefaultPlanCacheSize, about 200 B each with short keys, identities
	// of Plan.Key included: BenchmarkPlanCacheBytes), and as many keys
	// found to have none, kept apart so that unknown keys sprayed at the
	// limiter never push out a customer's plan.
	CacheSize int
	// CacheTTL is how long a plan found is used before it is looked up
	// again (default DefaultPlanCacheTTL): a plan change reaches its key
	// within it, once the lookup answers.
	CacheTTL time.Duration
	// MaxStale is how long past CacheTTL a key keeps deciding on the
	// plan it has while its refresh fails, does not answer in time or
	// is refused for capacity (default DefaultPlanMaxStale): a database
	// outage shorter than that costs a customer nothing. After it the
	// key's decisions fail as a key never looked up would. A failed
	// refresh is tried again after a second (or CacheTTL, if shorter).
	MaxStale time.Duration
	// LookupTimeout bounds each lookup, from the resolver's call
	// (default DefaultPlanLookupTimeout): a decision waits for its key's
	// lookup until then at most, or until its own context ends if that is
	// sooner, whatever the resolver does. A key with no plan to fall back
	// on whose lookup runs out of time is refused as a busy service (a
	// denial marked Decision.Overloaded, 503 under every error policy,
	// fail-open included), whether the resolver returned the context's
	// error or ignored it.
	LookupTimeout time.Duration
	// MaxLookups bounds the lookups in flight at once (default
	// DefaultPlanMaxLookups), twice over: as many first lookups of keys
	// that have no plan, and apart from them as many refreshes of keys
	// that have one, so that unknown keys sprayed at the limiter never
	// hold up a customer's refresh. A lookup keeps its place until the
	// resolver returns, also past its deadline: 2×MaxLookups bounds the
	// goroutines a resolver that hangs can hold. A key whose lookup
	// cannot start for want of a place is not an outage: its decision is
	// a denial marked Decision.Overloaded (HTTP 503 with Retry-After
	// under every error policy, fail-open included). Concurrent
	// decisions for one key share its lookup.
	MaxLookups int
	// MaxPlans bounds the plans' limiters kept at once (default
	// DefaultMaxPlans). When a plan needs one and MaxPlans exist, a
	// limiter whose every key is back to a full quota is dropped; if
	// every one still holds a live limit, the decision is a denial
	// marked Decision.Overloaded until one does (its RetryAfter says
	// when). A live limit is never dropped.
	MaxPlans int
	// Inherit says what a key keeps of what it used when its plan
	// changes: KeepUsed (the default) or ScaleUsed. AddDifference and
	// StartFresh are refused: a client who can switch its own plan back
	// and forth would be forgiven the difference, or everything, each
	// time.
	Inherit Inherit
	// Clock replaces the system clock for the cache's times (tests).
	Clock func() time.Time
}

// PlanLimiter limits each key at the rate of its own plan, which a
// resolver looks up (the plan of an API key's customer, in a database)
// and a bounded cache keeps. It is a Limiter: the middleware, a
// PolicySelector and business code use it as any other, and each
// Decision reports the key's own quota.
//
// It keeps one limiter per distinct plan in use, built by PlanConfig.New,
// and decides each key on its plan's, under the key's identity
// (Plan.Key: by default the key itself). When a key's plan changes (the
// cache looked it up again and found another), the key keeps what it
// used, converted as PlanConfig.Inherit says (KeepUsed by default): an
// upgrade gives a limited customer the difference at once, a downgrade
// never frees one.
//
// In memory, a key's record says where its identity's state lives, and
// a decision reads it, moves the state to the limiter of the plan it
// decides under, and decides, all under one lock of the identity's:
// whatever plan a decision decides on, it decides on the key's state as
// the last decision left it, so concurrent decisions across a plan
// change never see the state in both limiters or in neither. A key whose
// record the cache let go is looked for in every plan's limiter. A
// plan's limiter is dropped (to make room, see PlanConfig.MaxPlans) only
// once every state in it is back to a fresh one, and decisions then go
// to a new one for the plan.
//
// On Redis, every plan's limiter on one prefix, the state stays in its
// key, which carries the rate it was written under, and the key's first
// decision under the new plan converts it in place, as Inherit says, with
// the arithmetic of SetRate (redisstore's AllowPlanN): as in memory, under
// KeepUsed an upgrade gives the difference at once. That is sound only
// for plans of one Period (a counter's windows are the period's): a plan
// of another Period than the first plan built fails its lookup with
// ErrPlanLookup.
// Do not call SetRate on a plan's limiter: every plan's limiter on the
// prefix shares one rate record.
//
// Lookups: a key's plan is looked up on its first decision, and again
// once CacheTTL has passed. The resolver runs on a goroutine of its own,
// so that LookupTimeout holds whatever it does. Decisions for a key that
// has no plan yet wait for its lookup (within their context and the
// lookup's deadline); a lookup that fails fails them with an error
// wrapping ErrPlanLookup (the middleware's error policy answers it), and
// is not cached. A lookup that does not answer within LookupTimeout is
// refused for time as one is for capacity: a denial marked Overloaded,
// which no error policy lets through (a made-up key whose lookup is slow
// must not pass as an outage would). A key that has a plan
// keeps deciding on it while its refresh is in flight, fails, or is
// refused, up to MaxStale; only the decision that starts a refresh waits
// for it, and no longer than LookupTimeout. A key the resolver says has
// no plan (ErrNoPlan) is remembered as such for CacheTTL, in a part of
// the cache of its own: unknown keys sprayed at the limiter cost one
// lookup each, bounded in flight by MaxLookups (past it they are refused
// as Overloaded, never let through), and never push a customer's plan
// out nor hold up its refresh. Put a limit by client IP in front of it
// to bound the lookups one client can force.
//
// A cached decision costs one lock and one map lookup more than the
// plan's limiter alone, and allocates nothing. A PlanLimiter is safe for
// concurrent use.
type PlanLimiter struct {
	cfg     PlanConfig
	seed    maphash.Seed
	stripes []planStripe
	mask    uint64
	// firsts and refreshes hold a token per lookup in flight: of keys
	// with no plan, and of keys with one (see PlanConfig.MaxLookups).
	firsts, refreshes chan struct{}
	// plansMu guards plans and period; a plan's limiter is dropped with
	// every stripe locked as well (see drop).
	plansMu sync.Mutex
	plans   map[planID]*planSlot
	// period is the Period of the plans whose limiters keep their state
	// in place (on Redis): all must have the same; 0 before the first.
	period time.Duration
	// ttl, stale and backoff are CacheTTL, MaxStale and the wait after a
	// failed refresh, in nanoseconds.
	ttl, stale, backoff int64
}

// NewPlanLimiter returns a PlanLimiter for c. Invalid settings (a nil
// Resolve or New, a negative size or time, an Inherit other than
// KeepUsed and ScaleUsed) are refused with ErrInvalidOption.
func NewPlanLimiter(c PlanConfig) (*PlanLimiter, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	p := &PlanLimiter{cfg: c, seed: maphash.MakeSeed(),
		firsts: make(chan struct{}, c.MaxLookups), refreshes: make(chan struct{}, c.MaxLookups),
		plans: map[planID]*planSlot{}, ttl: int64(c.CacheTTL), stale: int64(c.MaxStale),
		backoff: int64(min(time.Second, c.CacheTTL))}
	p.stripes = newPlanStripes(c.CacheSize)
	p.mask = uint64(len(p.stripes) - 1)
	return p, nil
}

// defaults checks c and fills in its defaults.
func (c *PlanConfig) defaults() error {
	switch {
	case c.Resolve == nil:
		return fmt.Errorf("%w: PlanConfig.Resolve is nil", ErrInvalidOption)
	case c.New == nil:
		return fmt.Errorf("%w: PlanConfig.New is nil", ErrInvalidOption)
	case c.CacheSize < 0 || c.CacheTTL < 0 || c.MaxStale < 0 || c.LookupTimeout < 0 || c.MaxLookups < 0 || c.MaxPlans < 0:
		return fmt.Errorf("%w: PlanConfig sizes and times must not be negative", ErrInvalidOption)
	case c.Inherit != KeepUsed && c.Inherit != ScaleUsed:
		return fmt.Errorf("%w: PlanConfig.Inherit %v: a plan change takes KeepUsed or ScaleUsed; %v would let a client who can change its own plan buy back its quota",
			ErrInvalidOption, c.Inherit, c.Inherit)
	}
	c.CacheSize = or(c.CacheSize, DefaultPlanCacheSize)
	c.CacheTTL = or(c.CacheTTL, DefaultPlanCacheTTL)
	c.MaxStale = or(c.MaxStale, DefaultPlanMaxStale)
	c.LookupTimeout = or(c.LookupTimeout, DefaultPlanLookupTimeout)
	c.MaxLookups = or(c.MaxLookups, DefaultPlanMaxLookups)
	c.MaxPlans = or(c.MaxPlans, DefaultMaxPlans)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Allow is AllowN(ctx, key, 1).
func (p *PlanLimiter) Allow(ctx context.Context, key string) (Decision, error) {
	return p.AllowN(ctx, key, 1)
}

// AllowN decides n units for key at the rate of its plan: see
// PlanLimiter. A key whose plan cannot be found gets an error wrapping
// ErrPlanLookup, or ErrNoPlan from the resolver, and a Decision that does
// not allow. A key whose lookup, or whose plan's limiter, is refused for
// capacity (MaxLookups, MaxPlans) gets a denial marked Overloaded, with
// no error: the service is busy, and no error policy lets it through.
func (p *PlanLimiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	for range planTries {
		st, rec, err := p.ready(ctx, key)
		if err != nil {
			return p.refused(err)
		}
		slot, id := rec.slot, rec.id(key)
		if slot.dropped {
			plan := rec.plan(key)
			st.mu.Unlock()
			if err := p.reslot(st, key, plan); err != nil {
				return p.refused(err)
			}
			continue
		}
		if slot.mover == nil {
			// On Redis the state stays in its key, converted by the
			// script: no lock is held across the round trip.
			st.mu.Unlock()
			return p.allowInPlace(ctx, slot, id, n)
		}
		if d, ok, err := p.decide(ctx, st, rec, id, n); ok {
			return d, err
		}
	}
	return Decision{}, fmt.Errorf("%w: key %.32q: its plan's limiter was replaced %d times during one decision", ErrPlanLookup, key, planTries)
}

// planTries bounds the rounds of a decision whose plan's limiter is
// dropped under it (see AllowN): each is rare already.
const planTries = 4

// decide decides n units on rec's plan's limiter for identity id, the
// one rec's key counts under, with the identity's state moved there
// first (see settle), under the identity's stripe lock. st, rec's
// stripe, is locked; decide unlocks what it holds. It returns false,
// having decided nothing, if the plan's limiter was dropped while it
// changed stripes.
func (p *PlanLimiter) decide(ctx context.Context, st *planStripe, rec *planRecord, id string, n int) (Decision, bool, error) {
	slot, home := rec.slot, rec
	if rec.alias != nil {
		if ist := p.stripe(id); ist != st {
			st.mu.Unlock()
			st = ist
			st.mu.Lock()
			if slot.dropped {
				st.mu.Unlock()
				return Decision{}, false, nil
			}
		}
		home = st.identity(id)
	}
	var d Decision
	err := p.settle(home, slot, id)
	if err == nil {
		d, err = slot.lim.AllowN(ctx, id, n)
	}
	st.mu.Unlock()
	return d, true, err
}

// refused turns err into the answer of a decision: a busy service (a
// lookup or a plan's limiter refused for capacity) is a denial marked
// Overloaded, which no error policy lets through; anything else is
// returned as an error.
func (p *PlanLimiter) refused(err error) (Decision, error) {
	var busy *planBusy
	if errors.As(err, &busy) {
		return Decision{Overloaded: true, RetryAfter: busy.wait}, nil
	}
	return Decision{}, err
}

// PlanOf returns key's plan, looking it up if the cache does not hold
// it: the plan its next decision would be made under. An error wraps
// ErrNoPlan, or ErrPlanLookup (also for a lookup refused for capacity).
func (p *PlanLimiter) PlanOf(ctx context.Context, key string) (Plan, error) {
	st, rec, err := p.ready(ctx, key)
	if err != nil {
		return Plan{}, err
	}
	plan := rec.plan(key)
	st.mu.Unlock()
	return plan, nil
}

// settle makes sure the state of identity id is in to's limiter, moving
// it from the one home says holds it, or from any plan's limiter that
// holds it when that is not known (the cache let the record go). The
// identity's stripe must be locked.
func (p *PlanLimiter) settle(home *planRecord, to *planSlot, id string) error {
	switch from := home.home; {
	case from == to:
		return nil
	case from == nil:
		if err := p.gather(to, id); err != nil {
			return err
		}
	case !from.dropped:
		if err := p.move(from, to, id); err != nil {
			return err
		}
		// A dropped limiter held no live state when it was dropped, and
		// no decision has been made on it since (see drop): nothing to
		// move.
	}
	home.home = to
	return nil
}

// gather moves the state of identity id into to from every other plan's
// limiter that holds it.
func (p *PlanLimiter) gather(to *planSlot, id string) error {
	var buf [4]*planSlot
	from := buf[:0]
	p.plansMu.Lock()
	for _, s := range p.plans {
		if s != to && s.mover != nil && s.mover.holds(id) {
			from = append(from, s)
		}
	}
	p.plansMu.Unlock()
	for _, s := range from {
		if err := p.move(s, to, id); err != nil {
			return err
		}
	}
	return nil
}

// move moves the state of identity id from from's limiter to to's,
// converted as PlanConfig.Inherit says.
func (p *PlanLimiter) move(from, to *planSlot, id string) error {
	ok, err := from.mover.moveTo(to.lim, id, p.cfg.Inherit)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: a key cannot move from plan %q to plan %q: their limiters are of different kinds, or were built apart (build them with TokenBucketPlans, SlidingLogPlans or SlidingCounterPlans, which share a clock)",
			ErrInvalidOption, from.plan.Name, to.plan.Name)
	}
	return nil
}

// nanos returns the cache's clock.
func (p *PlanLimiter) nanos() int64 { return p.cfg.Clock().UnixNano() }

var _ Limiter = (*PlanLimiter)(nil)
