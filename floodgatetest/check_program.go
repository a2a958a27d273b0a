package floodgatetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Program is what the checker runs: rounds of operations, each round's
// operations at once (each worker runs its own in order), the clock
// moved between rounds. Check generates programs from seeds; a failing
// one is shrunk and printed as a Program literal for Replay.
type Program struct {
	// Seed is the seed the program was generated from; under the
	// deterministic scheduler it also seeds the order of the calls.
	Seed uint64
	// Workers is how many calls run at once.
	Workers int
	// Deterministic runs the program under the seeded deterministic
	// scheduler; otherwise its calls run free (see Scheduler).
	Deterministic bool
	// Rounds are the program's rounds.
	Rounds []Round
}

// Round is one round of a Program: the clock moves by Advance, then the
// operations run.
type Round struct {
	Advance time.Duration
	// Tick, under Checker.MovingClock, moves the clock by that much
	// while the round's calls are in flight.
	Tick time.Duration
	Ops  []Op
}

// OpKind is what an operation does.
type OpKind uint8

// The operations. A call that the limiter allowed stays the worker's
// until an OpSettle settles it (or the program ends): its real cost is
// then charged (Op.Real, for a floodgate.Charger and Refunder, or through
// the admission core under GateConfig.SettledCost), its slots released (a
// floodgate.Releaser), or its booking given back (a reservation whose
// Real is 0).
const (
	// OpAllow calls AllowN(Key, N), or admits a call of cost N through
	// the admission core (Checker.Gate).
	OpAllow OpKind = iota + 1
	// OpReserve calls ReserveN(Key, N, MaxWait).
	OpReserve
	// OpSettle settles the worker's oldest call still unsettled.
	OpSettle
	// OpReset calls Reset(Key).
	OpReset
	// OpSetRate calls SetRate with Checker.Rates[Rate] and Inherit.
	OpSetRate
	// OpSetPlan makes the resolver answer Checker.Plans[Plan] for Key
	// from now on (-1: no plan); the limiter sees it once its cache
	// looks the key up again.
	OpSetPlan
)

func (k OpKind) String() string {
	switch k {
	case OpAllow:
		return "OpAllow"
	case OpReserve:
		return "OpReserve"
	case OpSettle:
		return "OpSettle"
	case OpReset:
		return "OpReset"
	case OpSetRate:
		return "OpSetRate"
	case OpSetPlan:
		return "OpSetPlan"
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one operation of a Program.
type Op struct {
	Worker   int // who runs it, from 0
	Instance int // which instance it goes to (Checker.Instances), from 0
	Kind     OpKind
	// Key is the key: "k<i>" for the random traffic, "s<i>" for a steady
	// key (one request at a time, under its quota), "u<i>" for one with
	// no plan, "x<i>" for one of a spray (Checker.Spray).
	Key     string
	N       int           // the cost (OpAllow, OpReserve)
	Real    int           // the call's real cost, charged when it settles
	MaxWait time.Duration // OpReserve
	Rate    int           // OpSetRate: an index in Checker.Rates
	Inherit floodgate.Inherit
	Plan    int // OpSetPlan: an index in Checker.Plans, -1 for none
	// Abandon gives the call a context that ends within a millisecond.
	Abandon bool
	// HangUp cancels the call's context once its round is over, if it is
	// still waiting for its turn (GateConfig.Wait).
	HangUp bool
}

// size returns the number of operations of p.
func (p Program) size() int {
	n := 0
	for _, r := range p.Rounds {
		n += len(r.Ops)
	}
	return n
}

// caps is what the limiter under check can do.
type caps struct {
	reset, refund, charge, reserve, setRate, release bool
}

func (c caps) settles() bool { return c.refund || c.charge || c.release || c.reserve }

// generate returns the program of seed under scheduler sched.
func (c *checker) generate(seed uint64, sched Scheduler) Program {
	rng := rand.New(rand.NewPCG(seed, 0xf100d9a7e0c4ec4))
	g := &gen{c: c, rng: rng}
	p := Program{Seed: seed, Workers: c.Workers, Deterministic: sched == Deterministic}
	for range c.Rounds {
		p.Rounds = append(p.Rounds, g.round())
	}
	return p
}

// gen draws the operations of a program.
type gen struct {
	c       *checker
	rng     *rand.Rand
	now     time.Duration // the clock of the round being drawn
	steady  []float64     // units each steady key is due
	madeUp  int
	sprayed int
	setRate bool // a SetRate in this round already
}

// steadyKeys is how many keys get steady traffic.
const steadyKeys = 2

func (g *gen) capacity() int {
	switch {
	case len(g.c.Parts) > 0:
		m := 0
		for i, p := range g.c.Parts {
			if cp := (setup{rate: p.Rate, burst: p.Burst}).capacity(); i == 0 || cp < m {
				m = cp
			}
		}
		return m
	case len(g.c.Plans) > 0:
		m := 0
		for _, p := range g.c.Plans {
			m = max(m, planSetup(g.c.Algorithm, p).capacity())
		}
		return m
	}
	return g.c.setupOf().capacity()
}

// period returns the shortest period in play.
func (g *gen) period() time.Duration {
	switch {
	case len(g.c.Parts) > 0:
		return g.c.Parts[0].Rate.Period
	case len(g.c.Plans) > 0:
		return g.c.Plans[0].Rate.Period
	case g.c.Algorithm == InFlightSlots:
		return 100 * time.Millisecond
	}
	return g.c.Rate.Period
}

func (g *gen) round() Round {
	c, rng := g.c, g.rng
	var r Round
	period := g.period()
	tick := max(period/time.Duration(max(g.capacity(), 1)), time.Millisecond)
	switch x := rng.IntN(100); {
	case x < 20:
	case x < 70:
		r.Advance = time.Duration(1+rng.Int64N(int64(tick/time.Millisecond)+1)) * time.Millisecond
	case x < 95:
		r.Advance = whole(time.Duration(rng.Int64N(int64(period)) + 1))
	default:
		r.Advance = whole(time.Duration(rng.Int64N(3*int64(period)) + 1))
	}
	if c.MovingClock && rng.IntN(3) == 0 {
		r.Tick = time.Duration(1+rng.IntN(int(max(tick/time.Millisecond, 1)))) * time.Millisecond
	}
	g.now += r.Advance
	g.setRate = false
	for w := range c.Workers {
		for range rng.IntN(3) {
			if op, ok := g.op(); ok {
				op.Worker = w
				op.Instance = rng.IntN(c.Instances)
				r.Ops = append(r.Ops, op)
				if op.Kind == OpAllow && op.N > 0 && (c.caps.settles() || c.Gate != nil) && rng.IntN(2) == 0 {
					// Most calls are short: settled in the round they
					// are decided in (the worker's oldest call first).
					r.Ops = append(r.Ops, Op{Worker: w, Instance: op.Instance, Kind: OpSettle})
				}
			}
		}
	}
	r.Ops = append(r.Ops, g.steadyOps(r.Advance)...)
	for range c.Spray {
		g.sprayed++
		r.Ops = append(r.Ops, Op{Worker: rng.IntN(c.Workers), Instance: rng.IntN(c.Instances), Kind: OpAllow,
			Key: fmt.Sprintf("x%d", g.sprayed), N: g.capacity(), Real: g.capacity()})
	}
	return r
}

// steadyOps returns this round's requests of the steady keys: at 89 %
// of the quota over time (a unit every 1.12 periods' share of one), at
// most a sixteenth of the limit at once, on random workers and
// instances, so that an exact limiter never denies one.
func (g *gen) steadyOps(advance time.Duration) []Op {
	c := g.c
	if c.Algorithm == InFlightSlots || len(c.Plans) > 0 || c.Gate != nil {
		return nil
	}
	if g.steady == nil {
		g.steady = make([]float64, steadyKeys)
	}
	limit := c.Rate.Limit
	if len(c.Parts) > 0 {
		limit = g.capacity() // the smallest part's
	}
	burst := float64(max(limit/16, 1))
	var ops []Op
	for i := range g.steady {
		g.steady[i] = min(g.steady[i]+float64(limit)*float64(advance)/float64(g.period())/1.12, burst)
		for ; g.steady[i] >= 1; g.steady[i]-- {
			ops = append(ops, Op{Worker: g.rng.IntN(c.Workers), Instance: g.rng.IntN(c.Instances),
				Kind: OpAllow, Key: fmt.Sprintf("s%d", i), N: 1, Real: 1})
		}
	}
	return ops
}

func (g *gen) key() string { return fmt.Sprintf("k%d", g.rng.IntN(g.c.Keys)) }

// op draws one operation; false when the draw fell on one the limiter
// does not support.
func (g *gen) op() (Op, bool) {
	c, rng, cp := g.c, g.rng, g.c.caps
	capacity := g.capacity()
	x := rng.IntN(100)
	if len(c.Plans) > 0 && c.Without&PlanChanges == 0 && rng.IntN(8) == 0 {
		x = 90 // a key's plan changes often: the moves are what is checked
	}
	switch {
	case x < 55:
		op := Op{Kind: OpAllow, Key: g.key(), N: g.cost(capacity)}
		if c.Gate != nil {
			op.N = max(op.N, 1) // an admitted call costs at least 1
			op.HangUp = c.Gate.Wait != nil && rng.IntN(4) == 0
		}
		op.Real = g.real(op.N, cp)
		op.Abandon = c.Abandon && rng.IntN(6) == 0
		if len(c.Plans) > 0 && rng.IntN(5) == 0 {
			g.madeUp++
			op.Key = fmt.Sprintf("u%d", g.madeUp)
		}
		return op, true
	case x < 75:
		return Op{Kind: OpSettle}, cp.settles() || c.Gate != nil
	case x < 83:
		if !cp.reserve || c.Gate != nil {
			return Op{}, false
		}
		n := 1 + rng.IntN(capacity)
		if c.MaxCost > 0 {
			n = min(n, c.MaxCost)
		}
		op := Op{Kind: OpReserve, Key: g.key(), N: n, MaxWait: whole(time.Duration(rng.Int64N(int64(g.period())) + 1))}
		if rng.IntN(3) > 0 {
			op.Real = n // kept; 0: the booking is given back when settled
		}
		return op, true
	case x < 87:
		return Op{Kind: OpReset, Key: g.key()}, cp.reset
	case x < 90:
		if !cp.setRate || len(c.Rates) == 0 || g.setRate {
			return Op{}, false
		}
		g.setRate = true
		return Op{Kind: OpSetRate, Rate: rng.IntN(len(c.Rates)), Inherit: c.Inherits[rng.IntN(len(c.Inherits))]}, true
	case x < 97:
		if len(c.Plans) == 0 || c.Without&PlanChanges != 0 {
			return Op{}, false
		}
		return Op{Kind: OpSetPlan, Key: g.key(), Plan: rng.IntN(len(c.Plans))}, true
	}
	return Op{}, false
}

// cost draws a decision's cost: mostly one unit, sometimes none, some
// units, the whole capacity, or more than it.
func (g *gen) cost(capacity int) int {
	n := 1 << 20
	switch x := g.rng.IntN(100); {
	case x < 8:
		n = 0
	case x < 60:
		n = 1
	case x < 88:
		n = 1 + g.rng.IntN(max(capacity, 1))
	case x < 94:
		n = capacity
	case x < 99:
		n = capacity + 1
	}
	if g.c.MaxCost > 0 {
		n = min(n, g.c.MaxCost)
	}
	return n
}

// real draws a call's real cost: mostly its estimate, sometimes less (if
// the limiter refunds), sometimes more (if it charges).
func (g *gen) real(n int, cp caps) int {
	less, more := cp.refund || g.c.Gate != nil, cp.charge
	if g.c.Gate != nil {
		less = g.c.Gate.SettledCost && g.c.Without&Refunds == 0
	}
	switch x := g.rng.IntN(100); {
	case x < 55:
	case x < 75 && less:
		return g.rng.IntN(n + 1)
	case x >= 75 && more:
		return n + 1 + g.rng.IntN(2*n+4)
	}
	return n
}

// goString prints p as a Program literal.
func (p Program) goString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "floodgatetest.Program{\n\tSeed: %d, Workers: %d, Deterministic: %v,\n\tRounds: []floodgatetest.Round{\n", p.Seed, p.Workers, p.Deterministic)
	for _, r := range p.Rounds {
		b.WriteString("\t\t{")
		var parts []string
		if r.Advance != 0 {
			parts = append(parts, "Advance: "+durationLiteral(r.Advance))
		}
		if r.Tick != 0 {
			parts = append(parts, "Tick: "+durationLiteral(r.Tick))
		}
		if len(r.Ops) > 0 {
			var ops []string
			for _, op := range r.Ops {
				ops = append(ops, "\t\t\t"+op.goString()+",")
			}
			parts = append(parts, "Ops: []floodgatetest.Op{\n"+strings.Join(ops, "\n")+"\n\t\t}")
		}
		b.WriteString(strings.Join(parts, ", "))
		b.WriteString("},\n")
	}
	b.WriteString("\t},\n}")
	return b.String()
}

func (op Op) goString() string {
	parts := []string{fmt.Sprintf("Worker: %d", op.Worker)}
	if op.Instance != 0 {
		parts = append(parts, fmt.Sprintf("Instance: %d", op.Instance))
	}
	parts = append(parts, "Kind: floodgatetest."+op.Kind.String())
	if op.Key != "" {
		parts = append(parts, fmt.Sprintf("Key: %q", op.Key))
	}
	if op.N != 0 {
		parts = append(parts, fmt.Sprintf("N: %d", op.N))
	}
	if op.Real != 0 {
		parts = append(parts, fmt.Sprintf("Real: %d", op.Real))
	}
	if op.MaxWait != 0 {
		parts = append(parts, "MaxWait: "+durationLiteral(op.MaxWait))
	}
	if op.Kind == OpSetRate {
		parts = append(parts, fmt.Sprintf("Rate: %d, Inherit: floodgate.%v", op.Rate, op.Inherit))
	}
	if op.Kind == OpSetPlan {
		parts = append(parts, fmt.Sprintf("Plan: %d", op.Plan))
	}
	if op.Abandon {
		parts = append(parts, "Abandon: true")
	}
	if op.HangUp {
		parts = append(parts, "HangUp: true")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// durationLiteral prints d as Go source.
func durationLiteral(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%d * time.Second", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d * time.Millisecond", d/time.Millisecond)
	}
	return fmt.Sprintf("time.Duration(%d)", int64(d))
}

// String describes op for a history.
func (op Op) String() string {
	switch op.Kind {
	case OpAllow:
		s := fmt.Sprintf("allow %s n=%d", op.Key, op.N)
		if op.Real != op.N {
			s += fmt.Sprintf(" (real %d)", op.Real)
		}
		return s
	case OpReserve:
		return fmt.Sprintf("reserve %s n=%d maxWait=%v", op.Key, op.N, op.MaxWait)
	case OpSettle:
		return "settle"
	case OpReset:
		return "reset " + op.Key
	case OpSetRate:
		return fmt.Sprintf("setRate #%d %v", op.Rate, op.Inherit)
	case OpSetPlan:
		return fmt.Sprintf("setPlan %s #%d", op.Key, op.Plan)
	}
	return op.Kind.String()
}
