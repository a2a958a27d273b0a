package floodgate

import (
	"fmt"
	"sync/atomic"
	"time"
)

// planID identifies a plan's limiter: its rate and burst.
type planID struct {
	rate  Rate
	burst int
}

// planSlot is the limiter of one plan (rate and burst).
type planSlot struct {
	id    planID
	plan  Plan // the first plan of id, for errors
	lim   Limiter
	mover planMover // lim, if it can move a key's state to another of its kind
	// dropped is set, with every stripe locked, when the slot is no
	// longer the plan's limiter (see drop); decisions read it under a
	// stripe lock.
	dropped bool
	// busy is a time (the cache's clock) before which the limiter was
	// last found to hold a live state: it is not asked again before
	// then (see victim). Decisions never write it.
	busy atomic.Int64
}

// planMover is implemented by the in-memory limiters, whose keys a
// PlanLimiter moves from one plan's limiter to another's.
type planMover interface {
	// moveTo moves key's state into to, a limiter of the same kind,
	// converted as how says; false if to is not of the same kind.
	moveTo(to Limiter, key string, how Inherit) (bool, error)
	// holds reports whether the limiter holds state for key.
	holds(key string) bool
	// idleIn returns how long until every state the limiter holds
	// equals a fresh one (see store.idleIn).
	idleIn() time.Duration
}

// idleIn returns how long until every state of s's limiter equals a
// fresh one: 0 when it does already, and for a limiter that keeps no
// state of its own (on Redis).
func (s *planSlot) idleIn() time.Duration {
	if s.mover == nil {
		return 0
	}
	return s.mover.idleIn()
}

// idleIn returns how long, in the store's clock, until every state the
// store holds equals a fresh one: the keys it tracks and the debts it
// remembers; 0 if they all do now. It locks each shard in turn and reads
// every key: a PlanLimiter asks it only when a new plan needs a limiter
// and none is free (see PlanLimiter.victim), never on a decision.
func (s *store[S, A]) idleIn() time.Duration {
	var end, now int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		t := sh.hold(s.clock.nanos())
		now = max(now, t)
		if sh.debts != nil {
			end = max(end, sh.debts.until) // every debt remembered ends by then
		}
		for _, p := range sh.pages {
			for j := range p {
				if v := sh.alg.debt(&p[j].st, t); v.owes(t) {
					end = max(end, v.at)
				}
			}
		}
		sh.mu.Unlock()
	}
	return durationNS(end - now)
}

// planBusy is the error of a lookup, or of a plan's limiter, refused for
// capacity: the decision is a denial marked Overloaded (see refused),
// and a PlanOf or KnownKey error wrapping ErrPlanLookup.
type planBusy struct {
	wait time.Duration // when to try again
	why  string
}

func (e *planBusy) Error() string {
	return fmt.Sprintf("%v: %s; try again in %v", ErrPlanLookup, e.why, e.wait)
}

func (e *planBusy) Unwrap() error { return ErrPlanLookup }

// slot returns the limiter of plan, building it the first time. When
// MaxPlans limiters exist already, one that holds no live state is
// dropped to make room (see drop); when every one holds some, the error
// is a planBusy saying when one may be free.
func (p *PlanLimiter) slot(plan Plan) (*planSlot, error) {
	id := planID{plan.Rate, plan.Burst}
	for range planTries {
		p.plansMu.Lock()
		if s := p.plans[id]; s != nil {
			p.plansMu.Unlock()
			return s, nil
		}
		if len(p.plans) < p.cfg.MaxPlans {
			s, err := p.build(id, plan)
			p.plansMu.Unlock()
			return s, err
		}
		victim, wait := p.victim()
		p.plansMu.Unlock()
		if victim == nil {
			return nil, &planBusy{wait: wait, why: fmt.Sprintf("plan %q needs a limiter, and the %d of PlanConfig.MaxPlans all hold live limits", plan.Name, p.cfg.MaxPlans)}
		}
		p.drop(victim)
	}
	return nil, &planBusy{wait: time.Second, why: fmt.Sprintf("plan %q needs a limiter, and others took every one freed (PlanConfig.MaxPlans)", plan.Name)}
}

// build builds the limiter of plan. p.plansMu must be locked.
func (p *PlanLimiter) build(id planID, plan Plan) (*planSlot, error) {
	lim, err := p.cfg.New(plan)
	if err != nil {
		return nil, fmt.Errorf("%w: plan %q: %w", ErrPlanLookup, plan.Name, err)
	}
	if isNil(lim) {
		return nil, fmt.Errorf("%w: plan %q: PlanConfig.New returned no limiter", ErrPlanLookup, plan.Name)
	}
	s := &planSlot{id: id, plan: plan, lim: lim}
	s.mover, _ = lim.(planMover)
	if s.mover == nil {
		if p.period != 0 && p.period != plan.Rate.Period {
			return nil, fmt.Errorf("%w: plan %q has period %v, another plan %v: on Redis a key's state stays in its key and is read under its new plan as it is, which is sound only for plans of one period (see PlanLimiter)",
				ErrPlanLookup, plan.Name, plan.Rate.Period, p.period)
		}
		p.period = plan.Rate.Period
	}
	p.plans[id] = s
	return s, nil
}

// victim returns a limiter that holds no live state, or nil and how
// long until the first one may. A limiter found live is not asked again
// before the time it said (its states only grow older, or are renewed).
// p.plansMu must be locked.
func (p *PlanLimiter) victim() (*planSlot, time.Duration) {
	now := p.nanos()
	wait := time.Duration(1<<63 - 1)
	for _, s := range p.plans {
		if b := s.busy.Load(); now < b {
			wait = min(wait, time.Duration(b-now))
			continue
		}
		w := s.idleIn()
		if w == 0 {
			return s, 0
		}
		s.busy.Store(addSat(now, int64(w)))
		wait = min(wait, w)
	}
	return nil, wait
}

// drop drops s, if it is still its plan's limiter and holds no live
// state, with every stripe locked: no decision is deciding on it, and
// every later one sees it dropped and goes to a new limiter of the plan
// (see PlanLimiter.reslot). Its keys' states are all fresh, so nothing is
// lost with it. Reading them holds up every decision of the PlanLimiter
// for a pass over the limiter's keys; it happens only when a new plan
// needs a limiter and MaxPlans exist.
func (p *PlanLimiter) drop(s *planSlot) {
	for i := range p.stripes {
		p.stripes[i].mu.Lock()
	}
	p.plansMu.Lock()
	if p.plans[s.id] == s && s.idleIn() == 0 {
		// Records may point at s until their keys' next decisions: let
		// the limiter's memory go now (no one reads it once dropped).
		s.dropped, s.lim, s.mover = true, nil, nil
		delete(p.plans, s.id)
	}
	p.plansMu.Unlock()
	for i := range p.stripes {
		p.stripes[i].mu.Unlock()
	}
}

// reslot gives key's record, in st, a limiter of its plan in place of
// one that was dropped, if it still needs one.
func (p *PlanLimiter) reslot(st *planStripe, key string, plan Plan) error {
	s, err := p.slot(plan)
	if err != nil {
		return err
	}
	st.mu.Lock()
	if rec, ok := st.known.Peek(key); ok && rec.hasPlan && rec.slot.dropped && rec.slot.id == s.id {
		rec.slot = s
	}
	st.mu.Unlock()
	return nil
}
