package floodgate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/yield"
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
}

// PlanResolver returns the plan of key, within ctx's deadline (see
// PlanConfig.LookupTimeout). It returns ErrNoPlan for a key that has
// none (an unknown API key): the PlanLimiter then fails the decision
// with that error, the client's own doing (400 under every error policy,
// fail-open included), which PlanLimiter.KnownKey turns into ErrNoKey so
// that a PolicySelector tries its next policy. Any other error fails
// the decision too (ErrPlanLookup), and the middleware's error policy
// answers it: fail closed (503) unless you chose otherwise. A failed
// lookup never falls to a default or lenient plan.
type PlanResolver func(ctx context.Context, key string) (Plan, error)

// Errors of a PlanLimiter.
var (
	// ErrNoPlan is returned by a PlanResolver for a key that has no plan.
	ErrNoPlan = errors.New("floodgate: the key has no plan")
	// ErrPlanLookup is wrapped by the error of a decision whose key's
	// plan could not be found: the resolver failed or ran out of time, or
	// too many lookups were in flight (PlanConfig.MaxLookups).
	ErrPlanLookup = errors.New("floodgate: the key's plan could not be looked up")
)

// Defaults of PlanConfig.
const (
	DefaultPlanCacheSize     = 1 << 16
	DefaultPlanCacheTTL      = time.Minute
	DefaultPlanLookupTimeout = 100 * time.Millisecond
	DefaultPlanMaxLookups    = 64
	DefaultMaxPlans          = 64
)

// PlanConfig configures a PlanLimiter (NewPlanLimiter).
type PlanConfig struct {
	// Resolve returns a key's plan. Required.
	Resolve PlanResolver
	// New builds the limiter of a plan, once per distinct plan (rate and
	// burst), the first time a key on it is decided: in memory
	// (TokenBucketPlans and friends), or on Redis (every plan's limiter
	// on one prefix, and every plan of one Period: see PlanLimiter). All
	// of one algorithm. Required.
	New func(Plan) (Limiter, error)
	// CacheSize bounds the keys whose plan is kept (default
	// DefaultPlanCacheSize, about 100 B each), and as many keys found to
	// have none, kept apart so that unknown keys sprayed at the limiter
	// never push out a customer's plan.
	CacheSize int
	// CacheTTL is how long a plan found is used before it is looked up
	// again (default DefaultPlanCacheTTL): a plan change reaches its key
	// within it.
	CacheTTL time.Duration
	// LookupTimeout bounds each lookup (default DefaultPlanLookupTimeout);
	// a shorter deadline on the caller's context wins.
	LookupTimeout time.Duration
	// MaxLookups bounds the lookups in flight at once (default
	// DefaultPlanMaxLookups): a decision that would start one more fails
	// at once with ErrPlanLookup. Concurrent decisions for one key share
	// its lookup.
	MaxLookups int
	// MaxPlans bounds the distinct plans, each with its limiter (default
	// DefaultMaxPlans); a key on one more fails its decisions.
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
// It keeps one limiter per distinct plan, built by PlanConfig.New, and
// sends each key's decisions to its plan's. When a key's plan changes
// (the cache looked it up again and found another), the key keeps what it
// used, converted as PlanConfig.Inherit says (KeepUsed by default): an
// upgrade gives a limited customer the difference at once, a downgrade
// never frees one. In memory the key's state moves from the old plan's
// limiter to the new one's, under a lock of the key's (one of 256
// stripes) that its decisions take too, so that no decision sees it in
// both or neither.
//
// On Redis, every plan's limiter on one prefix, the state stays in its
// key and the next decision reads it under the new plan's rate as it
// stands: a window (sliding log or counter) and an intervally refilled
// bucket keep the units they counted (KeepUsed), a greedy token bucket
// keeps the time its debt takes to refill (with bursts equal to the
// limits, ScaleUsed: the share of the quota used); Inherit is not
// consulted. Switching back and forth never shortens a key's wait. That is sound only for plans of one Period (a counter's
// windows, a bucket's refill time are the period's): a plan of another
// Period than the first plan built fails its lookup with ErrPlanLookup.
// Do not call SetRate on a plan's limiter: every plan's limiter on the
// prefix shares one rate record.
//
// Lookups: a key's plan is looked up on its first decision, and again
// once CacheTTL has passed; decisions for a key whose lookup is in flight
// wait for it (within their context). A lookup that fails, or does not
// answer within LookupTimeout, fails the decision with an error wrapping
// ErrPlanLookup (the middleware's error policy answers it), and is not
// cached. A key the resolver says has no plan (ErrNoPlan) is remembered
// as such for CacheTTL, in a part of the cache of its own: unknown keys
// sprayed at the limiter cost one lookup each, bounded in flight by
// MaxLookups, and never push a customer's plan out. Put a limit by client
// IP in front of it to bound the lookups one client can force.
//
// A PlanLimiter is safe for concurrent use.
type PlanLimiter struct {
	cfg     PlanConfig
	seed    maphash.Seed
	cache   []planShard
	lookups chan struct{} // a slot per lookup in flight
	stripes [planStripes]sync.Mutex
	plansMu sync.Mutex
	plans   map[planID]*planSlot
	// period is the Period of the plans whose limiters keep their state
	// in place (on Redis): all must have the same; 0 before the first.
	period time.Duration
	nplans atomic.Int32
	ttl    int64
}

// planStripes is the number of locks that serialise a key's decisions
// with the move of its state (in memory).
const planStripes = 256

// planID identifies a plan's limiter: its rate and burst.
type planID struct {
	rate  Rate
	burst int
}

// planSlot is one plan's limiter.
type planSlot struct {
	plan  Plan
	lim   Limiter
	mover planMover // lim, if it can move a key's state to another of its kind
}

// planMover is implemented by the in-memory limiters, whose keys a
// PlanLimiter moves from one plan's limiter to another's.
type planMover interface {
	// moveTo moves key's state into to, a limiter of the same kind,
	// converted as how says; false if to is not of the same kind.
	moveTo(to Limiter, key string, how Inherit) (bool, error)
	// holds reports whether the limiter holds state for key.
	holds(key string) bool
}

// NewPlanLimiter returns a PlanLimiter for c. Invalid settings (a nil
// Resolve or New, a negative size or time, an Inherit other than
// KeepUsed and ScaleUsed) are refused with ErrInvalidOption.
func NewPlanLimiter(c PlanConfig) (*PlanLimiter, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	p := &PlanLimiter{cfg: c, seed: maphash.MakeSeed(), lookups: make(chan struct{}, c.MaxLookups),
		plans: map[planID]*planSlot{}, ttl: int64(c.CacheTTL)}
	p.cache = newPlanCache(c.CacheSize)
	return p, nil
}

// defaults checks c and fills in its defaults.
func (c *PlanConfig) defaults() error {
	switch {
	case c.Resolve == nil:
		return fmt.Errorf("%w: PlanConfig.Resolve is nil", ErrInvalidOption)
	case c.New == nil:
		return fmt.Errorf("%w: PlanConfig.New is nil", ErrInvalidOption)
	case c.CacheSize < 0 || c.CacheTTL < 0 || c.LookupTimeout < 0 || c.MaxLookups < 0 || c.MaxPlans < 0:
		return fmt.Errorf("%w: PlanConfig sizes and times must not be negative", ErrInvalidOption)
	case c.Inherit != KeepUsed && c.Inherit != ScaleUsed:
		return fmt.Errorf("%w: PlanConfig.Inherit %v: a plan change takes KeepUsed or ScaleUsed; %v would let a client who can change its own plan buy back its quota",
			ErrInvalidOption, c.Inherit, c.Inherit)
	}
	c.CacheSize = or(c.CacheSize, DefaultPlanCacheSize)
	c.CacheTTL = or(c.CacheTTL, DefaultPlanCacheTTL)
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
// not allow.
func (p *PlanLimiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	d, _, err := p.allowPlan(ctx, key, n)
	return d, err
}

// allowPlan is AllowN, also returning the plan decided under.
func (p *PlanLimiter) allowPlan(ctx context.Context, key string, n int) (Decision, Plan, error) {
	e, err := p.entry(ctx, key)
	if err != nil {
		return Decision{}, Plan{}, err
	}
	yield.Point(ctx, "PlanLimiter: between the plan lookup and the key's lock")
	slot := e.slot
	if slot.mover == nil {
		// On Redis the state stays in its key, converted by the script.
		d, err := slot.lim.AllowN(ctx, key, n)
		return d, slot.plan, err
	}
	mu := &p.stripes[maphash.String(p.seed, key)%planStripes]
	mu.Lock()
	err = p.settle(e, key)
	var d Decision
	if err == nil {
		d, err = slot.lim.AllowN(ctx, key, n)
	}
	mu.Unlock()
	return d, slot.plan, err
}

// PlanOf returns key's plan, looking it up if the cache does not hold it.
func (p *PlanLimiter) PlanOf(ctx context.Context, key string) (Plan, error) {
	e, err := p.entry(ctx, key)
	if err != nil {
		return Plan{}, err
	}
	return e.slot.plan, nil
}

// KnownKey returns a key function that yields what key returns if its
// plan is known, and an error wrapping ErrNoKey if the resolver says it
// has none: in a PolicySelector, a request with an unknown API key then
// falls through to the next policy (by client IP, say) instead of getting
// a quota of its own for every key made up. A failed lookup is returned
// as such, wrapping ErrPlanLookup. The lookup is the cached one the
// decision then uses.
func (p *PlanLimiter) KnownKey(key KeyFunc) KeyFunc {
	if key == nil {
		return nil
	}
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return "", err
		}
		if _, err := p.entry(r.Context(), k); err != nil {
			if errors.Is(err, ErrNoPlan) {
				return "", fmt.Errorf("%w: %w", ErrNoKey, err)
			}
			return "", err
		}
		return k, nil
	}
}

// settle makes sure key's state is in the limiter of its plan, moving it
// from the one it was decided under last, or from any plan's limiter that
// holds it when that is not known (the cache forgot it). The key's stripe
// must be locked.
func (p *PlanLimiter) settle(e *planEntry, key string) error {
	home := e.home.Load()
	if home == e.slot {
		return nil
	}
	if home != nil {
		return p.move(e, home, key)
	}
	p.plansMu.Lock()
	var from []*planSlot
	for _, s := range p.plans {
		if s != e.slot && s.mover != nil && s.mover.holds(key) {
			from = append(from, s)
		}
	}
	p.plansMu.Unlock()
	for _, s := range from {
		if err := p.move(e, s, key); err != nil {
			return err
		}
	}
	e.home.Store(e.slot)
	return nil
}

// move moves key's state from slot from to e's.
func (p *PlanLimiter) move(e *planEntry, from *planSlot, key string) error {
	ok, err := from.mover.moveTo(e.slot.lim, key, p.cfg.Inherit)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: a key cannot move from plan %q to plan %q: their limiters are of different kinds, or were built apart (build them with TokenBucketPlans, SlidingLogPlans or SlidingCounterPlans, which share a clock)",
			ErrInvalidOption, from.plan.Name, e.slot.plan.Name)
	}
	e.home.Store(e.slot)
	return nil
}

// slot returns the limiter of plan, building it the first time.
func (p *PlanLimiter) slot(plan Plan) (*planSlot, error) {
	id := planID{plan.Rate, plan.Burst}
	p.plansMu.Lock()
	defer p.plansMu.Unlock()
	if s := p.plans[id]; s != nil {
		return s, nil
	}
	if len(p.plans) >= p.cfg.MaxPlans {
		return nil, fmt.Errorf("%w: plan %q would be plan %d, above PlanConfig.MaxPlans", ErrPlanLookup, plan.Name, len(p.plans)+1)
	}
	lim, err := p.cfg.New(plan)
	if err != nil {
		return nil, fmt.Errorf("%w: plan %q: %w", ErrPlanLookup, plan.Name, err)
	}
	if isNil(lim) {
		return nil, fmt.Errorf("%w: plan %q: PlanConfig.New returned no limiter", ErrPlanLookup, plan.Name)
	}
	s := &planSlot{plan: plan, lim: lim}
	s.mover, _ = lim.(planMover)
	if s.mover == nil {
		if p.period != 0 && p.period != plan.Rate.Period {
			return nil, fmt.Errorf("%w: plan %q has period %v, another plan %v: on Redis a key's state stays in its key and is read under its new plan as it is, which is sound only for plans of one period (see PlanLimiter)",
				ErrPlanLookup, plan.Name, plan.Rate.Period, p.period)
		}
		p.period = plan.Rate.Period
	}
	p.plans[id] = s
	p.nplans.Store(int32(len(p.plans)))
	return s, nil
}

// nanos returns the cache's clock.
func (p *PlanLimiter) nanos() int64 { return p.cfg.Clock().UnixNano() }

var _ Limiter = (*PlanLimiter)(nil)
