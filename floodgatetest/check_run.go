package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/yield"
)

// run is one program's execution: its limiters, clock, workers and
// history.
type run struct {
	c      *checker
	log    logger
	p      Program
	clock  *Clock
	prefix string
	insts  []*instance
	hist   history
	sched  *scheduler // nil when the calls run free
	plans  *planBook  // nil without Checker.Plans
	ws     []*worker
	start  time.Time
	keys   map[string]bool // every key an operation used
	keysMu sync.Mutex

	ticksMu sync.Mutex
	ticks   []time.Duration // every time the clock has shown, since epoch
	// barriers[i] is the history's sequence number at the end of round i,
	// barrierT[i] the clock then.
	barrierMu sync.Mutex
	barriers  []int
	barrierT  []time.Duration
}

// instance is one limiter of a program, and the admission core over it.
type instance struct {
	lim  floodgate.Limiter
	gate *floodgate.Gate
	sel  *floodgate.SelectorFor[string]
}

// worker runs its operations in order, one at a time.
type worker struct {
	id      int
	r       *run
	ctx     context.Context
	pending []*call // allowed calls not settled yet, oldest first
	queue   chan Op
	busy    atomic.Int32 // operations queued and not done
	// asleep is the call waiting for its turn (GateConfig.Wait), while
	// one does.
	mu     sync.Mutex
	asleep *call
	rng    *rand.Rand
}

// call is an allowed call a worker holds until it settles it.
type call struct {
	rec      *crec
	inst     *instance
	key      string
	n, real  int
	instance int  // the index of inst
	reserved bool // booked with ReserveN
	out      floodgate.Outcome
	gated    bool
	cancel   context.CancelFunc
	hangUp   bool
	cancelAt int           // the history's sequence number when its context was cancelled
	cancelT  time.Duration // and the clock then
}

// logger is where a run notes what is not a failure: testing.TB, or
// nothing (Checker.Find).
type logger interface {
	Logf(format string, args ...any)
}

type discard struct{}

func (discard) Logf(string, ...any) {}

// probe builds one instance to learn what the limiter supports.
func (c *checker) probe() (caps, error) {
	clock := NewClock(epoch)
	var resolve floodgate.PlanResolver
	if len(c.Plans) > 0 {
		resolve = (&planBook{c: c, at: map[string]int{}}).resolve
	}
	lim, err := c.New(c.config(clock, clock.Now, resolve, "floodgatetest-probe", 0))
	if err != nil {
		return caps{}, fmt.Errorf("New: %w", err)
	}
	if lim == nil {
		return caps{}, errors.New("New returned a nil limiter and no error")
	}
	defer closeLimiter(lim)
	return c.capsOf(lim), nil
}

// capsOf returns what lim can do, as the checker uses it.
func (c *checker) capsOf(lim floodgate.Limiter) caps {
	var cp caps
	_, cp.reset = lim.(floodgate.Resetter)
	_, cp.refund = lim.(floodgate.Refunder)
	_, cp.charge = lim.(floodgate.Charger)
	_, cp.reserve = lim.(floodgate.Reserver)
	_, cp.setRate = lim.(floodgate.RateSetter)
	_, cp.release = lim.(floodgate.Releaser)
	if ch, ok := lim.(interface{ Charges() bool }); ok && !ch.Charges() {
		cp.charge = false
	}
	if r, ok := lim.(interface{ Reserves() bool }); ok && !r.Reserves() {
		cp.reserve = false
	}
	if len(c.Parts) > 0 {
		// A Composite has every method, and can do what all its parts can.
		cp.release, cp.setRate = false, false
		for _, p := range c.Parts {
			cp.reserve = cp.reserve && p.Algorithm.bucket()
		}
	}
	if c.Algorithm == InFlightSlots {
		cp.refund, cp.charge, cp.reserve = false, false, false
	}
	w := c.Without
	cp.setRate = cp.setRate && w&RateChanges == 0
	cp.refund = cp.refund && w&Refunds == 0
	cp.charge = cp.charge && w&Charges == 0
	cp.reserve = cp.reserve && w&Reservations == 0
	cp.reset = cp.reset && w&Resets == 0
	if c.Gate != nil {
		cp.reserve = false // the admission core books itself (GateConfig.Wait)
		if !c.Gate.SettledCost {
			cp.charge = false
		}
	}
	return cp
}

func closeLimiter(lim floodgate.Limiter) {
	if cl, ok := lim.(io.Closer); ok {
		_ = cl.Close()
	}
}

func (c *checker) config(clock *Clock, now func() time.Time, resolve floodgate.PlanResolver, prefix string, i int) CheckConfig {
	return CheckConfig{Rate: c.Rate, Burst: c.Burst, CountDenied: c.CountDenied, Clock: clock, Now: now,
		Resolve: resolve, Prefix: prefix, Instance: i}
}

// runProgram runs p and checks its history; nil if nothing was found.
func (c *checker) runProgram(log logger, p Program) (*failure, error) {
	r, err := c.newRun(log, p)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if p.Deterministic {
		disable := yield.Enable()
		r.execDeterministic()
		disable()
	} else {
		r.execFree()
	}
	if r.sched != nil && r.sched.deadlock != "" {
		return &failure{kind: failDeadlock, msg: r.sched.deadlock}, nil
	}
	return r.check(), nil
}

func (c *checker) newRun(log logger, p Program) (*run, error) {
	r := &run{c: c, log: log, p: p, clock: NewClock(epoch), start: time.Now(), keys: map[string]bool{},
		prefix: fmt.Sprintf("fgc%d-%x", p.Seed, rand.Uint32())}
	r.ticks = []time.Duration{0}
	now := r.clock.Now
	if p.Deterministic {
		r.sched = newScheduler(p.Seed, p.Workers)
		r.sched.tick = func(d time.Duration) { r.advance(d) }
		now = func() time.Time {
			r.sched.yieldCurrent("clock read")
			return r.clock.Now()
		}
	}
	var resolve floodgate.PlanResolver
	if len(c.Plans) > 0 {
		r.plans = &planBook{c: c, at: map[string]int{}, free: !p.Deterministic}
		resolve = r.plans.resolve
	}
	for i := range c.Instances {
		lim, err := c.New(c.config(r.clock, now, resolve, r.prefix, i))
		if err == nil && lim == nil {
			err = errors.New("New returned a nil limiter and no error")
		}
		if err != nil {
			r.close()
			return nil, fmt.Errorf("New: %w", err)
		}
		inst := &instance{lim: lim}
		r.insts = append(r.insts, inst)
		if c.Gate != nil {
			if inst.sel, inst.gate, err = c.gate(lim, r.clock); err != nil {
				r.close()
				return nil, err
			}
		}
	}
	for i := range p.Workers {
		w := &worker{id: i, r: r, ctx: context.Background(), rng: rand.New(rand.NewPCG(p.Seed, uint64(i)))}
		if r.sched != nil {
			w.ctx = yield.With(w.ctx, func(where string, until <-chan struct{}) { r.sched.yield(w.id, where, until) })
		}
		r.ws = append(r.ws, w)
	}
	return r, nil
}

// gate builds the admission core over lim.
func (c *checker) gate(lim floodgate.Limiter, clock *Clock) (*floodgate.SelectorFor[string], *floodgate.Gate, error) {
	sel, err := floodgate.NewSelectorFor(floodgate.PolicyFor[string]{Name: "checked", Limiter: lim,
		Key: func(k string) (string, error) { return k, nil }})
	if err != nil {
		return nil, nil, fmt.Errorf("NewSelectorFor: %w", err)
	}
	opts := []floodgate.MiddlewareOption{floodgate.WithWallClock(clock.Now)}
	if c.Gate.SettledCost {
		opts = append(opts, floodgate.WithSettledCost())
	}
	if c.Gate.Wait != nil {
		opts = append(opts, floodgate.WithWait(*c.Gate.Wait), floodgate.WithWaitTimer(clock.After))
	}
	if c.Gate.FailOpen {
		opts = append(opts, floodgate.WithFailOpen())
	}
	g, err := floodgate.NewGate(sel, append(opts, c.Gate.Options...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("NewGate: %w", err)
	}
	return sel, g, nil
}

func (r *run) close() {
	for _, w := range r.ws {
		if w.queue != nil {
			close(w.queue)
		}
	}
	for _, inst := range r.insts {
		closeLimiter(inst.lim)
	}
}

// advance moves the clock by d.
func (r *run) advance(d time.Duration) {
	if d <= 0 {
		return
	}
	now := r.clock.Advance(d).Sub(epoch)
	r.ticksMu.Lock()
	r.ticks = append(r.ticks, now)
	r.ticksMu.Unlock()
}

// real returns the real time since the run began.
func (r *run) real() time.Duration { return time.Since(r.start) }

// execDeterministic runs the program one call at a time.
func (r *run) execDeterministic() {
	s := r.sched
	for _, round := range r.p.Rounds {
		r.advance(round.Advance)
		r.detRound(round.Ops, round.Tick)
	}
	r.detRound(r.finalSettles(), 0)
	r.detRound(r.finalReports(), 0)
	_ = s
}

func (r *run) detRound(ops []Op, tick time.Duration) {
	byWorker := map[int][]Op{}
	var active []int
	for _, op := range ops {
		if op.Worker < 0 || op.Worker >= len(r.ws) {
			continue
		}
		if byWorker[op.Worker] == nil {
			active = append(active, op.Worker)
		}
		byWorker[op.Worker] = append(byWorker[op.Worker], op)
	}
	sort.Ints(active)
	r.sched.round(active, len(ops), func(w int) {
		go func() {
			for _, op := range byWorker[w] {
				r.sched.yield(w, "the start of "+op.String(), nil)
				r.ws[w].do(op)
			}
			r.sched.done(w)
		}()
	}, tick)
	r.endRound(r.hist.mark())
}

// execFree runs each round's calls at once on the workers' goroutines.
func (r *run) execFree() {
	total := r.p.size() + 16*len(r.ws) + 4096
	for _, w := range r.ws {
		w.queue = make(chan Op, total)
		go func() {
			for op := range w.queue {
				w.do(op)
				w.busy.Add(-1)
			}
		}()
	}
	for _, round := range r.p.Rounds {
		r.advance(round.Advance)
		r.dispatch(round.Ops)
		if round.Tick > 0 {
			for range 3 {
				runtime.Gosched()
			}
			r.advance(round.Tick)
		}
		r.barrier()
	}
	// Calls still waiting for their turn: move the clock on until they
	// are served.
	for i := 0; i < 1000 && r.busy() > 0; i++ {
		step := 100 * time.Millisecond
		if r.c.Gate != nil && r.c.Gate.Wait != nil {
			step = r.c.Gate.Wait.MaxWait
		}
		r.advance(step)
		r.barrier()
	}
	r.dispatch(r.finalSettles())
	r.barrier()
	r.dispatch(r.finalReports())
	r.barrier()
}

func (r *run) dispatch(ops []Op) {
	for _, op := range ops {
		if op.Worker < 0 || op.Worker >= len(r.ws) {
			continue
		}
		w := r.ws[op.Worker]
		w.busy.Add(1)
		w.queue <- op
	}
}

// busy returns how many workers have operations left.
func (r *run) busy() int {
	n := 0
	for _, w := range r.ws {
		if w.busy.Load() > 0 {
			n++
		}
	}
	return n
}

// barrier waits until every worker is done with its operations or asleep
// waiting for its turn on the clock, then ends the round: it cancels the
// waiting calls that hang up.
func (r *run) barrier() {
	waits := r.c.Gate != nil && r.c.Gate.Wait != nil
	for spins := 0; ; spins++ {
		b := r.busy()
		if b == 0 || waits && b == r.clock.Timers() && r.asleep() == b {
			break
		}
		if spins < 50 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	r.endRound(r.hist.mark())
	gone := map[*worker]*call{}
	for _, w := range r.ws {
		w.mu.Lock()
		c := w.asleep
		if c != nil && c.hangUp && c.cancel != nil && c.cancelAt == 0 {
			c.cancelAt, c.cancelT = r.hist.mark(), r.clock.Now().Sub(epoch)
			c.cancel()
			gone[w] = c
		}
		w.mu.Unlock()
	}
	// The clock stands still until the calls that hung up have given
	// their bookings back.
	for w, c := range gone {
		for {
			w.mu.Lock()
			still := w.asleep == c
			w.mu.Unlock()
			if !still {
				break
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// endRound notes the end of a round at sequence number seq.
func (r *run) endRound(seq int) {
	r.barrierMu.Lock()
	defer r.barrierMu.Unlock()
	r.barriers = append(r.barriers, seq)
	r.barrierT = append(r.barrierT, r.clock.Now().Sub(epoch))
}

// asleep returns how many workers have a call waiting for its turn.
func (r *run) asleep() int {
	n := 0
	for _, w := range r.ws {
		w.mu.Lock()
		if w.asleep != nil {
			n++
		}
		w.mu.Unlock()
	}
	return n
}

// finalSettles returns the operations that settle every call still held.
func (r *run) finalSettles() []Op {
	var ops []Op
	for _, w := range r.ws {
		for range w.pending {
			ops = append(ops, Op{Worker: w.id, Kind: OpSettle})
		}
	}
	return ops
}

// finalReports returns a report (n = 0) of every key used, from every
// instance: the state the history ends in, for the model to check.
func (r *run) finalReports() []Op {
	r.keysMu.Lock()
	keys := make([]string, 0, len(r.keys))
	for k := range r.keys {
		keys = append(keys, k)
	}
	r.keysMu.Unlock()
	sort.Strings(keys)
	var ops []Op
	for i, k := range keys {
		if strings.HasPrefix(k, "u") || strings.HasPrefix(k, "x") {
			continue
		}
		for inst := range r.insts {
			ops = append(ops, Op{Worker: (i + inst) % len(r.ws), Instance: inst, Kind: OpAllow, Key: k})
		}
	}
	return ops
}

// do runs one operation and records it.
func (w *worker) do(op Op) {
	r := w.r
	if op.Instance < 0 || op.Instance >= len(r.insts) {
		op.Instance = 0
	}
	inst := r.insts[op.Instance]
	if op.Key != "" {
		r.keysMu.Lock()
		r.keys[op.Key] = true
		r.keysMu.Unlock()
	}
	switch op.Kind {
	case OpAllow:
		if inst.gate != nil && op.N > 0 {
			w.admit(inst, op)
		} else {
			w.allow(inst, op)
		}
	case OpReserve:
		w.reserve(inst, op)
	case OpSettle:
		w.settle()
	case OpReset:
		if rs, ok := inst.lim.(floodgate.Resetter); ok {
			rec := r.hist.begin(r, w, op, effReset, op.Key)
			err := rs.Reset(w.callCtx(op), op.Key)
			r.hist.end(r, rec, func() { rec.setErr(err) })
		}
	case OpSetRate:
		if rs, ok := inst.lim.(floodgate.RateSetter); ok && op.Rate >= 0 && op.Rate < len(r.c.Rates) {
			rc := r.c.Rates[op.Rate]
			rc.Inherit = op.Inherit
			rec := r.hist.begin(r, w, op, effSetRate, "")
			rec.rc = rc
			err := rs.SetRate(w.ctx, rc)
			r.hist.end(r, rec, func() { rec.setErr(err) })
		}
	case OpSetPlan:
		if r.plans != nil {
			rec := r.hist.begin(r, w, op, effSetPlan, op.Key)
			r.plans.set(op.Key, op.Plan)
			r.hist.end(r, rec, nil)
		}
	}
}

// callCtx returns the context of a call: the worker's, or one that ends
// within a millisecond for an abandoned call.
func (w *worker) callCtx(op Op) context.Context {
	if !op.Abandon {
		return w.ctx
	}
	ctx, cancel := context.WithTimeout(w.ctx, time.Duration(w.rng.Int64N(int64(time.Millisecond))))
	_ = cancel // ends by itself: the deadline is the point
	return ctx
}

func (w *worker) allow(inst *instance, op Op) {
	r := w.r
	rec := r.hist.begin(r, w, op, effAllow, op.Key)
	rec.n = op.N
	d, err := inst.lim.AllowN(w.callCtx(op), op.Key, op.N)
	r.hist.end(r, rec, func() { rec.d = d; rec.setErr(err) })
	if err == nil && d.Allowed && op.N > 0 {
		w.pending = append(w.pending, &call{rec: rec, inst: inst, instance: op.Instance, key: op.Key, n: op.N, real: op.Real})
	}
}

func (w *worker) reserve(inst *instance, op Op) {
	r := w.r
	rs, ok := inst.lim.(floodgate.Reserver)
	if !ok {
		return
	}
	rec := r.hist.begin(r, w, op, effReserve, op.Key)
	rec.n, rec.maxWait = op.N, op.MaxWait
	res, err := rs.ReserveN(w.callCtx(op), op.Key, op.N, op.MaxWait)
	r.hist.end(r, rec, func() { rec.d, rec.wait = res.Decision, res.Wait; rec.setErr(err) })
	if err == nil && res.Allowed && op.N > 0 {
		w.pending = append(w.pending, &call{rec: rec, inst: inst, instance: op.Instance, key: op.Key, n: op.N, real: op.Real, reserved: true})
	}
}

// admit admits a call through the admission core.
func (w *worker) admit(inst *instance, op Op) {
	r := w.r
	g := r.c.Gate
	eff := effAllow
	if g.Wait != nil {
		eff = effReserve
	}
	ctx, cancel := context.WithCancel(w.callCtx(op))
	cl := &call{inst: inst, instance: op.Instance, key: op.Key, n: op.N, real: op.Real, gated: true, cancel: cancel, hangUp: op.HangUp}
	rec := r.hist.begin(r, w, op, eff, op.Key)
	rec.n, rec.gated = op.N, true
	if g.Wait != nil {
		rec.maxWait = g.Wait.MaxWait
		w.mu.Lock()
		w.asleep = cl
		w.mu.Unlock()
	}
	r.barrierMu.Lock()
	round := len(r.barriers)
	r.barrierMu.Unlock()
	call := inst.sel.Call(op.Key)
	call.Cost = op.N
	out := inst.gate.Admit(ctx, call)
	if g.Wait != nil {
		w.mu.Lock()
		w.asleep = nil
		w.mu.Unlock()
	}
	slept := out.Waited > 0 || out.Kind == floodgate.OutcomeHungUp
	r.hist.end(r, rec, func() {
		rec.d, rec.wait, rec.blocked = out.Decision, out.Waited, out.Blocked
		rec.setErr(out.Err)
		r.barrierMu.Lock()
		defer r.barrierMu.Unlock()
		if slept && round < len(r.barriers) {
			// It booked before the round it began in ended, then slept.
			rec.ret, rec.t1 = r.barriers[round], r.barrierT[round]
		}
		if out.Kind == floodgate.OutcomeHungUp {
			rec.hungUp = true
			rec.unknown = false
			rec.noEffect = false
			rec.err = nil
		}
	})
	w.mu.Lock()
	cancelAt, cancelT := cl.cancelAt, cl.cancelT
	w.mu.Unlock()
	if out.Kind == floodgate.OutcomeHungUp && cancelAt > 0 {
		// The booking was given back when the client hung up.
		back := r.hist.beginAt(r, w, op, effRefund, op.Key, cancelAt, cancelT)
		back.n, back.call, back.gated = op.N, rec, true
		r.hist.end(r, back, nil)
	}
	if out.NeedsSettle {
		cl.rec, cl.out = rec, out
		w.pending = append(w.pending, cl)
	} else {
		cancel()
	}
}

// settle settles the worker's oldest call.
func (w *worker) settle() {
	if len(w.pending) == 0 {
		return
	}
	cl := w.pending[0]
	w.pending = w.pending[1:]
	r := w.r
	op := Op{Worker: w.id, Instance: cl.instance, Kind: OpSettle, Key: cl.key} // settled where it was decided
	ctx := context.WithoutCancel(w.ctx)
	if cl.gated {
		defer cl.cancel()
		var effs []*crec
		if r.c.caps.release {
			e := r.hist.begin(r, w, op, effRelease, cl.key)
			e.n = cl.n
			effs = append(effs, e)
		}
		if r.c.Gate.SettledCost && cl.real != cl.n {
			kind, n := effRefund, cl.n-cl.real
			if cl.real > cl.n {
				kind, n = effCharge, cl.real-cl.n
			}
			e := r.hist.begin(r, w, op, kind, cl.key)
			e.n = n
			effs = append(effs, e)
		}
		cl.inst.gate.Settle(ctx, cl.out, floodgate.Result{Cost: cl.real, CostKnown: true})
		for _, e := range effs {
			e.call = cl.rec
			r.hist.end(r, e, nil)
		}
		return
	}
	lim := cl.inst.lim
	var (
		kind effKind
		n    int
		do   func() error
	)
	switch {
	case r.c.caps.release:
		kind, n = effRelease, cl.n
		do = func() error { return lim.(floodgate.Releaser).ReleaseN(ctx, cl.key, cl.n, 0) }
	case cl.reserved && cl.real == 0:
		kind, n = effRefund, cl.n
		do = func() error { return lim.(floodgate.Refunder).RefundN(ctx, cl.key, cl.n) }
	case cl.reserved:
		return
	case cl.real < cl.n && r.c.caps.refund:
		kind, n = effRefund, cl.n-cl.real
		do = func() error { return lim.(floodgate.Refunder).RefundN(ctx, cl.key, n) }
	case cl.real > cl.n && r.c.caps.charge:
		kind, n = effCharge, cl.real-cl.n
		do = func() error { return lim.(floodgate.Charger).ChargeN(ctx, cl.key, n) }
	default:
		return
	}
	rec := r.hist.begin(r, w, op, kind, cl.key)
	rec.n, rec.call = n, cl.rec
	err := do()
	r.hist.end(r, rec, func() { rec.setErr(err) })
}

// planBook is the checker's plan resolver: each key's plan, as the
// program's OpSetPlan operations set it.
type planBook struct {
	c    *checker
	mu   sync.Mutex
	at   map[string]int // key -> plan index, -1 for none
	free bool           // free-running: a lookup takes a moment, so that lookups overlap
}

// resolve is the PlanResolver. It is no yield point: a PlanLimiter calls
// it on a goroutine of its own, which no scheduler runs.
func (b *planBook) resolve(_ context.Context, key string) (floodgate.Plan, error) {
	if b.free {
		for range 20 {
			runtime.Gosched()
		}
	}
	i := b.planOf(key)
	if i < 0 {
		return floodgate.Plan{}, floodgate.ErrNoPlan
	}
	return b.c.Plans[i], nil
}

// planOf returns key's plan now.
func (b *planBook) planOf(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i, ok := b.at[key]; ok {
		return i
	}
	return initialPlan(key, len(b.c.Plans))
}

func (b *planBook) set(key string, plan int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.at[key] = plan
}

// initialPlan is the plan a key starts on: Plans[i % len] for "k<i>",
// none for any other.
func initialPlan(key string, plans int) int {
	var i int
	if _, err := fmt.Sscanf(key, "k%d", &i); err != nil || plans == 0 {
		return -1
	}
	return i % plans
}

// noEffect reports whether err says the call changed nothing: the
// request could never be allowed, the key has no plan or its plan could
// not be looked up, or the call was refused as invalid.
func noEffect(err error) bool {
	for _, e := range []error{floodgate.ErrCostExceedsLimit, floodgate.ErrInvalidCost, floodgate.ErrKeyTooLong,
		floodgate.ErrInvalidOption, floodgate.ErrNoPlan, floodgate.ErrPlanLookup} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
