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
	// used is the time of a recent decision, and full a time by which
	// every state the limiter holds is back to a fresh one: both in the
	// limiter's clock (see planMover.planNow), updated by each decision
	// (see note), coarsely.
	used, full atomic.Int64
}

// planMover is implemented by the in-memory limiters, whose keys a
// PlanLimiter moves from one plan's limiter to another's.
type planMover interface {
	// moveTo moves key's state into to, a limiter of the same kind,
	// converted as how says; false if to is not of the same kind.
	moveTo(to Limiter, key string, how Inherit) (bool, error)
	// holds reports whether the limiter holds state for key.
	holds(key string) bool
	// planNow returns the limiter's clock, in nanoseconds since its
	// epoch: the time its decisions' waits count from.
	planNow() int64
}

// planGrain is the granularity of planSlot.full, about a second: a
// decision raises full only when its own end passes full's, so that
// decisions rarely write it. A limiter counts as drained a grain after
// full, which also covers the few nanoseconds by which a state's debt
// may outlast the Decision.ResetAfter it was decided with (see debt).
const planGrain = 1 << 30

// note records decision d on s's limiter, just made: the key it was made
// for is back to a fresh state after d.ResetAfter.
func (s *planSlot) note(d Decision) {
	now := s.mover.planNow()
	if now-s.used.Load() >= planGrain>>4 {
		s.used.Store(now)
	}
	end := now + int64(d.ResetAfter)
	for f := s.full.Load(); end > f; f = s.full.Load() {
		if s.full.CompareAndSwap(f, (end|(planGrain-1))+1) {
			return
		}
	}
}

// drainedIn returns how long until every state of s's limiter is back to
// a fresh one: 0 when it is already, and for a limiter that keeps no
// state of its own (on Redis).
func (s *planSlot) drainedIn() time.Duration {
	if s.mover == nil {
		return 0
	}
	return time.Duration(max(s.full.Load()+planGrain-s.mover.planNow(), 0))
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
// MaxPlans limiters exist already, the least recently used one that holds
// no live state is dropped to make room (see drop); when every one holds
// some, the error is a planBusy saying when one will be free.
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

// victim returns the least recently used limiter that holds no live
// state, or nil and how long until the first one will. p.plansMu must be
// locked.
func (p *PlanLimiter) victim() (*planSlot, time.Duration) {
	var best *planSlot
	wait := time.Duration(1<<63 - 1)
	for _, s := range p.plans {
		w := s.drainedIn()
		switch {
		case w > 0:
			wait = min(wait, w)
		case best == nil || s.used.Load() < best.used.Load():
			best = s
		}
	}
	return best, wait
}

// drop drops s, if it is still its plan's limiter and holds no live
// state, with every stripe locked: no decision is deciding on it, and
// every later one sees it dropped and goes to a new limiter of the plan
// (see PlanLimiter.reslot). Its keys' states are all fresh, so nothing is
// lost with it.
func (p *PlanLimiter) drop(s *planSlot) {
	for i := range p.stripes {
		p.stripes[i].mu.Lock()
	}
	p.plansMu.Lock()
	if p.plans[s.id] == s && s.drainedIn() == 0 {
		s.dropped = true
		delete(p.plans, s.id)
	}
	p.plansMu.Unlock()
	for i := range p.stripes {
		p.stripes[i].mu.Unlock()
	}
}

// reslot gives key's record, in st, a limiter of its plan in place of
// one that was dropped (or never found), if it still needs one.
func (p *PlanLimiter) reslot(st *planStripe, key string, plan Plan) error {
	s, err := p.slot(plan)
	if err != nil {
		return err
	}
	st.mu.Lock()
	if rec, ok := st.known.Peek(key); ok && rec.hasPlan && (rec.slot == nil || rec.slot.dropped) &&
		rec.plan.Rate == plan.Rate && rec.plan.Burst == plan.Burst {
		rec.slot = s
	}
	st.mu.Unlock()
	return nil
}
