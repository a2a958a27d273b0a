package floodgate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/yield"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// planEntry is a key's plan in the cache: its plan's limiter, until when
// it holds, and (in memory) the limiter that holds the key's state.
type planEntry struct {
	slot    *planSlot
	expires int64
	home    atomic.Pointer[planSlot]
}

// planShards is the number of shards of the plan cache.
const planShards = 32

// planShard is one shard of the cache: the keys with a plan, and apart
// from them the keys found to have none, each a bounded LRU; and the
// lookups in flight, which the key's other decisions wait for.
type planShard struct {
	mu      sync.Mutex
	known   *simplelru.LRU[string, *planEntry]
	unknown *simplelru.LRU[string, int64] // until when the key has no plan
	flights map[string]*planFlight
}

// planFlight is a lookup in flight.
type planFlight struct {
	done chan struct{}
	e    *planEntry
	err  error
}

func newPlanCache(size int) []planShard {
	n := planShards
	for n > 1 && n > size {
		n /= 2
	}
	shards := make([]planShard, n)
	for i := range shards {
		per := max(size/n, 1)
		// NewLRU fails only for a size below one.
		shards[i].known, _ = simplelru.NewLRU[string, *planEntry](per, nil)
		shards[i].unknown, _ = simplelru.NewLRU[string, int64](per, nil)
		shards[i].flights = map[string]*planFlight{}
	}
	return shards
}

// entry returns key's plan from the cache, or looks it up: see
// PlanLimiter.
func (p *PlanLimiter) entry(ctx context.Context, key string) (*planEntry, error) {
	sh := &p.cache[maphash.String(p.seed, key)%uint64(len(p.cache))]
	now := p.nanos()
	sh.mu.Lock()
	if e, ok := sh.known.Get(key); ok && now < e.expires {
		sh.mu.Unlock()
		return e, nil
	}
	if until, ok := sh.unknown.Get(key); ok && now < until {
		sh.mu.Unlock()
		return nil, fmt.Errorf("floodgate: key %.32q: %w", key, ErrNoPlan)
	}
	if f := sh.flights[key]; f != nil {
		sh.mu.Unlock()
		yield.Until(ctx, "PlanLimiter: waiting for the key's lookup", f.done)
		select {
		case <-f.done:
			return f.e, f.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: the caller gave up waiting for the lookup: %w", ErrPlanLookup, ctx.Err())
		}
	}
	old, _ := sh.known.Peek(key)
	f := &planFlight{done: make(chan struct{})}
	sh.flights[key] = f
	sh.mu.Unlock()

	f.e, f.err = p.lookup(ctx, key, old, now)
	sh.mu.Lock()
	delete(sh.flights, key)
	switch {
	case f.err == nil:
		sh.known.Add(strings.Clone(key), f.e)
		sh.unknown.Remove(key)
	case errors.Is(f.err, ErrNoPlan):
		sh.unknown.Add(strings.Clone(key), now+p.ttl)
		sh.known.Remove(key)
	}
	sh.mu.Unlock()
	close(f.done)
	return f.e, f.err
}

// lookup asks the resolver for key's plan, at most MaxLookups at once and
// within LookupTimeout, and returns its cache entry. The lookup does not
// end when the caller that started it hangs up: other decisions for the
// key may wait for it.
func (p *PlanLimiter) lookup(ctx context.Context, key string, old *planEntry, now int64) (*planEntry, error) {
	select {
	case p.lookups <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: %d lookups in flight already (PlanConfig.MaxLookups)", ErrPlanLookup, cap(p.lookups))
	}
	defer func() { <-p.lookups }()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.LookupTimeout)
	plan, err := p.cfg.Resolve(cctx, key)
	cancel()
	switch {
	case errors.Is(err, ErrNoPlan):
		return nil, fmt.Errorf("floodgate: key %.32q: %w", key, ErrNoPlan)
	case err != nil:
		return nil, fmt.Errorf("%w: key %.32q: %w", ErrPlanLookup, key, err)
	}
	if err := plan.Rate.Validate(); err != nil || plan.Burst < 0 {
		return nil, fmt.Errorf("%w: key %.32q: the resolver returned plan %q with rate %v and burst %d: %v",
			ErrPlanLookup, key, plan.Name, plan.Rate, plan.Burst, err)
	}
	slot, err := p.slot(plan)
	if err != nil {
		return nil, err
	}
	e := &planEntry{slot: slot, expires: now + p.ttl}
	if old != nil {
		e.home.Store(old.home.Load())
	}
	return e, nil
}

// rateOf returns the rate of key's plan if the cache holds it, for the
// window of the key's headers (see policy.rateOf): the plan its decision
// was just made under, without a lookup.
func (p *PlanLimiter) rateOf(key string) (Rate, bool) {
	sh := &p.cache[maphash.String(p.seed, key)%uint64(len(p.cache))]
	sh.mu.Lock()
	e, ok := sh.known.Peek(key)
	sh.mu.Unlock()
	if !ok {
		return Rate{}, false
	}
	return e.slot.plan.Rate, true
}
