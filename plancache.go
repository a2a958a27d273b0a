package floodgate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/yield"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// planStripe is one stripe of a PlanLimiter's keys, under one lock that
// a key's decisions hold while they decide: the keys' records, apart
// from them the keys found to have no plan, and the lookups in flight.
type planStripe struct {
	mu      sync.Mutex
	known   *simplelru.LRU[string, *planRecord]
	unknown *simplelru.LRU[string, int64] // until when the key has no plan
	flights map[string]*planFlight
	_       [64]byte // keep stripes' locks on separate cache lines
}

// planRecord is what a PlanLimiter knows of one key, under its stripe's
// lock. As a key that was looked up: its plan, that plan's limiter and
// the identity it counts under. As an identity (see Plan.Key): the
// limiter that holds its state. A key that is its own identity (own) has
// one record for both; the record of an identity that is not a key
// looked up has no plan.
type planRecord struct {
	// expires: the plan is fresh until then (the cache's clock), and is
	// used while refreshes fail until MaxStale after.
	expires int64
	slot    *planSlot // the plan's limiter (its rate and burst); dropped: to be found again (see reslot)
	// home is the limiter that holds the identity's state (in memory),
	// nil when that is not known: every plan's limiter is looked in.
	home *planSlot
	// alias is the identity the key counts under when it is not the key
	// itself (Plan.Key); nil for a key that is its own.
	alias   *string
	name    string // the plan's Name
	retry   int64  // no refresh starts before then (after a failed one)
	keyed   bool   // the resolver gave a Plan.Key
	hasPlan bool   // slot, name, alias and keyed hold a plan
	// 64 bytes: a record per cached key is a fair share of the cache's
	// memory (see BenchmarkPlanCacheBytes).
}

// id returns the identity key counts under, rec being its record.
func (rec *planRecord) id(key string) string {
	if rec.alias != nil {
		return *rec.alias
	}
	return key
}

// plan returns the plan rec, key's record, holds, as the resolver gave
// it: its rate and burst are its limiter's.
func (rec *planRecord) plan(key string) Plan {
	p := Plan{Name: rec.name, Rate: rec.slot.id.rate, Burst: rec.slot.id.burst}
	if rec.keyed {
		p.Key = rec.id(key)
	}
	return p
}

// usable reports whether rec holds a plan to decide on at now: fresh, or
// stale by less than MaxStale.
func (p *PlanLimiter) usable(rec *planRecord, now int64) bool {
	return rec != nil && rec.hasPlan && now < addSat(rec.expires, p.stale)
}

// planFlight is a lookup in flight.
type planFlight struct {
	parent context.Context // the resolver's context before its deadline
	called chan struct{}   // closed when the resolver is called; ctx is set by then
	ctx    context.Context // the resolver's, with its deadline, LookupTimeout after the call
	done   chan struct{}   // closed once the answer is in the cache
	at     int64           // when the lookup started (the cache's clock)
	// timeout is PlanConfig.LookupTimeout: a waiter that meets the
	// deadline is told to come back after as long.
	timeout time.Duration
	// returned is set when the resolver has returned: the rest of the
	// lookup (finding the plan's limiter, caching the answer) is the
	// limiter's own, and a waiter that meets the deadline then waits
	// for it.
	returned atomic.Bool
	err      error // the lookup's error, set before done is closed
}

// planMaxStripes bounds the stripes of a PlanLimiter: enough that the
// decisions of different keys rarely wait for one another (a store has
// at most 64 shards too), few enough that the stripes' maps stay in the
// CPU's caches. Measured on BenchmarkPlanLimiter, 256 stripes cost about
// a tenth more CPU a decision than 32 to 128.
const planMaxStripes = 64

func newPlanStripes(size int) []planStripe {
	n := planMaxStripes
	for n > 1 && n*8 > size {
		n /= 2
	}
	stripes := make([]planStripe, n)
	for i := range stripes {
		per := max(size/n, 1)
		// NewLRU fails only for a size below one.
		stripes[i].known, _ = simplelru.NewLRU[string, *planRecord](per, nil)
		stripes[i].unknown, _ = simplelru.NewLRU[string, int64](per, nil)
		stripes[i].flights = map[string]*planFlight{}
	}
	return stripes
}

// stripe returns the stripe of key.
func (p *PlanLimiter) stripe(key string) *planStripe {
	return &p.stripes[maphash.String(p.seed, key)&p.mask]
}

// identity returns the record of identity id, a new one (its state's
// limiter not known) if there is none. The stripe must be locked.
func (st *planStripe) identity(id string) *planRecord {
	if rec, ok := st.known.Get(id); ok {
		return rec
	}
	rec := &planRecord{}
	st.known.Add(id, rec) // id is the record's own copy (see install)
	return rec
}

// ready returns key's record with a plan to decide on, its stripe
// locked: a fresh plan or, while a refresh is in flight, fails or is
// refused, the plan it has (up to MaxStale). A key with neither is
// looked up, or waits for the lookup in flight, within ctx and the
// lookup's deadline. Only the decision that starts a refresh waits for
// it. On error the stripe is not locked.
func (p *PlanLimiter) ready(ctx context.Context, key string) (*planStripe, *planRecord, error) {
	st := p.stripe(key)
	waited := false
	for {
		st.mu.Lock()
		now := p.nanos()
		rec, _ := st.known.Get(key)
		if p.usable(rec, now) {
			if now < rec.expires || waited || now < rec.retry || st.flights[key] != nil {
				return st, rec, nil
			}
			f, err := p.start(ctx, st, key, true)
			if err != nil {
				return st, rec, nil // refused for capacity: the plan it has
			}
			st.mu.Unlock()
			yield.Until(ctx, "PlanLimiter: waiting for the key's refresh", f.done)
			if err := f.wait(ctx, key); err != nil && ctx.Err() != nil {
				return nil, nil, err // the caller gave up; a failed refresh leaves the plan it has
			}
			waited = true
			continue
		}
		f, err := p.flight(ctx, st, key, rec, now, waited)
		st.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
		yield.Until(ctx, "PlanLimiter: waiting for the key's lookup", f.done)
		if err := f.wait(ctx, key); err != nil {
			return nil, nil, err
		}
		waited = true
	}
}

// flight returns the lookup of key, which has no plan to use, to wait
// for: the one in flight, or a new one. It fails for a key known to have
// no plan (ErrNoPlan), for one whose lookup has answered already (the
// answer did not leave a plan to use), and with a planBusy when no lookup
// can start. The stripe must be locked.
func (p *PlanLimiter) flight(ctx context.Context, st *planStripe, key string, rec *planRecord, now int64, waited bool) (*planFlight, error) {
	if until, ok := st.unknown.Get(key); ok && now < until {
		return nil, fmt.Errorf("floodgate: key %.32q: %w", key, ErrNoPlan)
	}
	if waited {
		return nil, fmt.Errorf("%w: key %.32q: its lookup answered, and left no plan to use (past PlanConfig.MaxStale, or pushed out of a cache too small for its traffic: PlanConfig.CacheSize)", ErrPlanLookup, key)
	}
	if f := st.flights[key]; f != nil {
		return f, nil
	}
	return p.start(ctx, st, key, rec != nil && rec.hasPlan)
}

// start starts a lookup of key, on a goroutine of its own (see lookup),
// with a token of its pool held until the resolver returns: refreshes
// of keys that have a plan (known) apart from first lookups, each at
// most MaxLookups at once however long the resolver takes. With no
// token free it fails at once, with a planBusy. The stripe must be
// locked.
func (p *PlanLimiter) start(ctx context.Context, st *planStripe, key string, known bool) (*planFlight, error) {
	pool := p.firsts
	if known {
		pool = p.refreshes
	}
	select {
	case pool <- struct{}{}:
	default:
		return nil, &planBusy{wait: p.cfg.LookupTimeout, why: "every lookup of PlanConfig.MaxLookups is in flight"}
	}
	// The lookup outlives the decision that starts it (others may wait
	// for it, and its answer is cached): it keeps ctx's values, not its
	// end.
	f := &planFlight{parent: context.WithoutCancel(ctx), called: make(chan struct{}), done: make(chan struct{}), at: p.nanos(),
		timeout: p.cfg.LookupTimeout}
	key = strings.Clone(key)
	st.flights[key] = f
	go p.lookup(st, key, f, pool)
	return f, nil
}

// lookup asks the resolver for key's plan and gives its pool's token
// back once the resolver has returned, finds the plan's limiter, and
// puts the answer in the cache (see install): also an answer that comes
// after everyone waiting for it gave up, which is as good as any.
func (p *PlanLimiter) lookup(st *planStripe, key string, f *planFlight, pool chan struct{}) {
	// The deadline counts from the call, so that a goroutine that waits
	// for a core does not spend the resolver's time.
	ctx, cancel := context.WithTimeout(f.parent, p.cfg.LookupTimeout)
	defer cancel()
	f.ctx = ctx
	close(f.called)
	plan, err := p.ask(ctx, key)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrNoPlan) {
		// The resolver gave up at the limiter's deadline: as if it had
		// ignored it (see wait), the lookup was refused for time, not
		// failed by an outage that fail-open would let through.
		err = lookupTimedOut(key, p.cfg.LookupTimeout)
	}
	f.returned.Store(true)
	<-pool
	var slot *planSlot
	if err == nil {
		slot, err = p.slot(plan)
	}
	st.mu.Lock()
	delete(st.flights, key)
	p.install(st, key, f.at, plan, slot, err)
	st.mu.Unlock()
	f.err = err
	close(f.done)
}

// ask calls the resolver and checks its answer. A resolver that panics
// fails the lookup: it runs on a goroutine of its own, where a panic
// would end the program.
func (p *PlanLimiter) ask(ctx context.Context, key string) (plan Plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			plan, err = Plan{}, fmt.Errorf("%w: key %.32q: the resolver panicked: %v", ErrPlanLookup, key, r)
		}
	}()
	plan, err = p.cfg.Resolve(ctx, key)
	switch {
	case errors.Is(err, ErrNoPlan):
		return Plan{}, fmt.Errorf("floodgate: key %.32q: %w", key, ErrNoPlan)
	case err != nil:
		return Plan{}, fmt.Errorf("%w: key %.32q: %w", ErrPlanLookup, key, err)
	}
	if err := plan.Rate.Validate(); err != nil || plan.Burst < 0 {
		return Plan{}, fmt.Errorf("%w: key %.32q: the resolver returned plan %q with rate %v and burst %d: %v",
			ErrPlanLookup, key, plan.Name, plan.Rate, plan.Burst, err)
	}
	return plan, nil
}

// install puts the answer of key's lookup, started at at, in the cache:
// a plan (with slot, its limiter), no plan (ErrNoPlan), or a failure,
// after which a key that has a plan keeps it (see MaxStale) and tries
// again later. The key's record, where its identity's state lives, stays
// as it is. The stripe must be locked.
func (p *PlanLimiter) install(st *planStripe, key string, at int64, plan Plan, slot *planSlot, err error) {
	rec, _ := st.known.Peek(key)
	switch {
	case err == nil:
		if rec == nil {
			rec = &planRecord{}
			st.known.Add(key, rec)
		}
		rec.slot, rec.name, rec.hasPlan, rec.retry = slot, plan.Name, true, 0
		rec.alias, rec.keyed = nil, plan.Key != ""
		if plan.Key != "" && plan.Key != key {
			id := strings.Clone(plan.Key)
			rec.alias = &id
		}
		rec.expires = addSat(at, p.ttl)
		st.unknown.Remove(key)
	case errors.Is(err, ErrNoPlan):
		st.unknown.Add(key, addSat(at, p.ttl))
		if rec != nil {
			rec.slot, rec.name, rec.alias, rec.hasPlan = nil, "", nil, false
		}
	case rec != nil:
		rec.retry = addSat(p.nanos(), p.backoff)
	}
}

// addSat returns a + b for b >= 0, held at the largest int64.
func addSat(a, b int64) int64 {
	if a > 1<<63-1-b {
		return 1<<63 - 1
	}
	return a + b
}

// wait waits for f to answer, until the resolver's deadline or ctx's
// end, whichever comes first, and returns the lookup's error or the
// reason it stopped waiting.
func (f *planFlight) wait(ctx context.Context, key string) error {
	select {
	case <-f.called:
	case <-ctx.Done():
		return planGaveUp(ctx)
	}
	select {
	case <-f.done:
		return f.err
	case <-f.ctx.Done():
		if ctx.Err() != nil {
			return planGaveUp(ctx) // the caller's own end comes first
		}
		if !f.returned.Load() {
			return lookupTimedOut(key, f.timeout)
		}
	case <-ctx.Done():
		return planGaveUp(ctx)
	}
	// The resolver answered; what is left is short and the limiter's own.
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return planGaveUp(ctx)
	}
}

// lookupTimedOut is the error of a lookup that did not answer within
// PlanConfig.LookupTimeout: the limiter's own deadline, not an outage the
// resolver reported. A made-up key whose lookup is slow (an attacker can
// make it so, and a slow database under a spray of them does) is refused
// as a busy service, never let through by fail-open.
func lookupTimedOut(key string, timeout time.Duration) error {
	return &planBusy{wait: timeout, why: fmt.Sprintf("key %.32q: the resolver did not answer within PlanConfig.LookupTimeout", key)}
}

// planGaveUp is the error of a decision whose caller gave up waiting for
// its key's lookup.
func planGaveUp(ctx context.Context) error {
	return fmt.Errorf("%w: the caller gave up waiting for the lookup: %w", ErrPlanLookup, ctx.Err())
}

// rateOf returns the rate of key's plan if the cache holds it, for the
// window of the key's headers (see policy.rateOf): the plan its decision
// was just made under, without a lookup.
func (p *PlanLimiter) rateOf(key string) (Rate, bool) {
	st := p.stripe(key)
	st.mu.Lock()
	rec, ok := st.known.Peek(key)
	ok = ok && rec.hasPlan
	var r Rate
	if ok {
		r = rec.slot.id.rate
	}
	st.mu.Unlock()
	return r, ok
}
