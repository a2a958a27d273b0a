package floodgatetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Checker describes a limiter for the concurrency checker, Check: how to
// build it, what it promises (its Algorithm and rate, or its Parts, or
// its Plans) and how much of it to exercise. Only New and what the
// limiter is (Algorithm, or Parts) are required; a zero field takes the
// default its documentation gives.
//
// The checker finds out by itself what the limiter supports, from the
// interfaces it implements — floodgate.Resetter, Refunder, Charger,
// Reserver, RateSetter, Releaser — and generates only operations it can
// take.
type Checker struct {
	// Name names the limiter in messages.
	Name string
	// Source is a Go expression, in the test package that calls Check,
	// whose value is this Checker (a variable, or a call of the function
	// that builds it): the repro test printed for a failure passes it to
	// Replay. Default "checker".
	Source string

	// Algorithm is the semantics the limiter promises (its sequential
	// model): TokenBucket, IntervalTokenBucket, SlidingLog,
	// SlidingCounter or InFlightSlots. Leave it zero for a Composite
	// described by Parts.
	Algorithm Algorithm
	// Rate is the rate the limiter is built with (a plan's, for Plans);
	// Burst a token bucket's capacity (0: Rate.Limit); CountDenied that a
	// sliding log counts denied attempts (floodgate.WithCountDenied).
	// For InFlightSlots, Rate.Limit is the slots a key may hold at once.
	Rate        floodgate.Rate
	Burst       int
	CountDenied bool
	// Parts describe the limits of a Composite (floodgate.All), in the
	// order New gives them to All; its model decides as All does over
	// their models.
	Parts []Part
	// Plans make the limiter a floodgate.PlanLimiter: New must build it
	// with CheckConfig.Resolve, which answers each key's plan as the
	// checker's operations set it (a key's first plan is
	// Plans[i % len(Plans)] for key "k<i>"; keys "u<i>" have none), and
	// the plans must have distinct capacities, so that Decision.Limit
	// says which plan a decision was made under. PlanInherit is the
	// limiter's PlanConfig.Inherit.
	Plans       []floodgate.Plan
	PlanInherit floodgate.Inherit

	// New builds one instance of the limiter for c. It is called once per
	// instance (Instances) for every program the checker runs; the
	// instances of one program must share their state (one Redis prefix,
	// CheckConfig.Prefix), and programs must not share theirs.
	New func(c CheckConfig) (floodgate.Limiter, error)
	// Instances is how many limiters New builds for one program, each
	// operation going to one of them (default 1): several instances of a
	// service on one Redis.
	Instances int
	// Gate drives the limiter through the admission core
	// (floodgate.NewGate) instead of calling it directly.
	Gate *GateConfig

	// Rates are what SetRate changes the rate to, for a
	// floodgate.RateSetter; default: twice and half the limit, twice and
	// half the period, and for a token bucket a larger burst. Inherits
	// are the strategies tried (default all four).
	Rates    []floodgate.RateChange
	Inherits []floodgate.Inherit
	// RateChangeOnNextDecision: the limiter converts a key to a new rate
	// when it next decides for it, from the rate it last decided under
	// (Suite.RateChangeOnNextDecision; the Redis limiters).
	RateChangeOnNextDecision bool
	// Resolution is the unit to which the limiter rounds the durations
	// it reports up (Suite.Resolution); zero: exact.
	Resolution time.Duration
	// MaxDebt is the limiter's bound on what a key may owe when charged
	// beyond its quota (floodgate.WithMaxDebt; zero:
	// floodgate.DefaultDebtLimits): the window models carry a charge's
	// excess into the coming windows up to it, as the limiters do.
	MaxDebt floodgate.DebtLimits

	// Lossy says the limiter may allow less than its model by design
	// (leased quota, a bounded store whose debt memory merges debts, a
	// Composite whose takes are undone): a decision must then never allow
	// what the model denies, nor report more Remaining, but a denial is
	// not compared. Shortfall then bounds, over a whole run, the units a
	// steady key (one whose traffic stays under its quota) may be denied
	// (0: none; negative: no bound, for a store that may lock a key out
	// by design); it is checked only for a Lossy limiter.
	Lossy     bool
	Shortfall int
	// Estimates says the limiter's Decision.Remaining is an estimate the
	// model does not hold it to (a leased limiter reports what its own
	// instance knows); with Lossy, only Allowed and Limit are compared.
	Estimates bool
	// DenyCache is the longest a cached denial may answer after the
	// state it came from changed on another instance
	// (redisstore.DenyCacheMaxAge, with redisstore.WithDenyCache): a
	// denial where the model allows is then accepted only within that
	// time after a Reset or a refund of the key on another instance, and
	// no denial may promise a RetryAfter longer than the model's and
	// DenyCache.
	DenyCache time.Duration
	// SlotLease is the lease of an in-flight limit's slots on Redis
	// (redisstore.WithSlotLease): a slot taken by a decision whose caller
	// gave up must come back within it. A program during which the
	// limiter says it lost leases of calls still running (a method
	// LostLeases() uint64 returning more than 0: a renewal came later
	// than the lease, so more than the limit may have been in flight, as
	// redisstore documents) is logged and not checked.
	SlotLease time.Duration
	// MaxKeys is the limiter's key bound (floodgate.WithMaxKeys), when
	// the checker should spray more keys than it: for an in-flight
	// limit, a call is then denied as Overloaded only while MaxKeys keys
	// hold slots.
	MaxKeys int

	// MaxCost bounds the cost of the decisions drawn (default: up to the
	// capacity plus one, and now and then 2^20).
	MaxCost int
	// Without names operations not to generate, though the limiter
	// supports them (default: every operation it supports).
	Without Ops

	// Keys is how many keys the operations spread over (default 4; 8
	// times MaxKeys when MaxKeys is set), Workers how many calls run at
	// once (default 4), Rounds how many rounds a program has (default
	// 40): the clock stands still during a round and moves between
	// rounds.
	Keys, Workers, Rounds int
	// Spray adds, to each round, that many decisions of the whole
	// capacity on keys used once ("x<i>"): a key spray, which evicts the
	// keys of a store bounded by WithMaxKeys while they still owe, and
	// fills its debt memory.
	Spray int
	// MovingClock moves the clock also while calls are in flight: every
	// decision may then be made at any time between its call and its
	// return, and the model tries each.
	MovingClock bool
	// Abandon gives some calls a context that ends within a millisecond,
	// so that some replies arrive after their caller gave up (a Redis
	// limiter with a short timeout).
	Abandon bool
	// Scheduler says how the calls of a round are interleaved: by the
	// seeded deterministic scheduler, by the Go scheduler (free-running
	// goroutines), or both, one program each per seed (the default for a
	// limiter built in memory). A limiter that blocks (the admission
	// core's waiting) or does I/O runs free only: Gate.Wait and
	// Instances > 1 imply FreeRunning.
	Scheduler Scheduler
	// Budget is how long Check runs programs (default 1 s, 20 s under
	// FLOODGATE_FULL=1): the fixed seeds 1, 2 and 3 first, then random
	// ones, each logged so that a failure replays
	// (FLOODGATE_CHECK_SEED=seed).
	Budget time.Duration
}

// Ops names kinds of operation, for Checker.Without.
type Ops uint

const (
	// RateChanges are calls of SetRate.
	RateChanges Ops = 1 << iota
	// Refunds give back part of a call's cost when it settles (its real
	// cost below its estimate).
	Refunds
	// Charges charge a call beyond its estimate when it settles (its real
	// cost above it).
	Charges
	// Reservations are calls of ReserveN, and their cancellation.
	Reservations
	// Resets are calls of Reset.
	Resets
	// PlanChanges change a key's plan (Checker.Plans).
	PlanChanges
)

// Part is one limit of a Composite (Checker.Parts).
type Part struct {
	Algorithm   Algorithm
	Rate        floodgate.Rate
	Burst       int
	CountDenied bool
}

// GateConfig says how the checker builds the admission core over the
// limiter (Checker.Gate): one policy keyed by the operation's key, built
// with floodgate.NewGate and these options. The checker adds
// floodgate.WithWallClock and, with Wait, floodgate.WithWaitTimer, both
// on its clock.
type GateConfig struct {
	// SettledCost charges each call its real cost when it settles
	// (floodgate.WithSettledCost): the operation's estimate is admitted,
	// and the difference is given back or charged at settlement.
	SettledCost bool
	// Wait holds a denied call for its turn (floodgate.WithWait).
	Wait *floodgate.WaitLimits
	// FailOpen lets calls through when the limiter fails
	// (floodgate.WithFailOpen): the checker then also requires that no
	// call of a key with no plan (Checker.Plans) ever reaches the
	// handler.
	FailOpen bool
	// Options are more options for floodgate.NewGate.
	Options []floodgate.MiddlewareOption
}

// Scheduler says how a program's concurrent calls are interleaved.
type Scheduler int

const (
	// BothSchedulers runs each seed once under each scheduler.
	BothSchedulers Scheduler = iota
	// Deterministic runs one call at a time, switching between calls at
	// yield points — the call boundaries, the reads of CheckConfig.Now,
	// and the points floodgate marks inside its compound decisions (a
	// Composite between its limiters, a PlanLimiter waiting for a lookup)
	// — in an order drawn from the seed, so that a failure replays
	// exactly from its seed.
	Deterministic
	// FreeRunning runs the calls of a round on their own goroutines, at
	// once.
	FreeRunning
)

func (s Scheduler) String() string {
	switch s {
	case Deterministic:
		return "deterministic"
	case FreeRunning:
		return "free-running"
	}
	return "both"
}

// InFlightSlots is the Algorithm of an in-flight limit (floodgate.NewInFlight,
// redisstore.NewInFlight): at most Rate.Limit slots held per key, taken by
// AllowN and given back by ReleaseN. Only the checker models it; the
// conformance suite does not take it.
const InFlightSlots Algorithm = 100

// CheckConfig is what the checker asks Checker.New to build.
type CheckConfig struct {
	// Rate, Burst and CountDenied are the Checker's.
	Rate        floodgate.Rate
	Burst       int
	CountDenied bool
	// Clock is the checker's clock: the limiter's only source of time.
	// It starts at a fixed instant and the checker alone moves it.
	Clock *Clock
	// Now reads Clock and, under the deterministic scheduler, is a yield
	// point. Give it to floodgate.WithClock where the limiter reads the
	// time holding no lock (the limiters of this module); give Clock.Now
	// where it may read the time under a lock of its own (a PlanLimiter's
	// PlanConfig.Clock and the limiters it builds), since a call parked
	// at a yield point under a lock blocks every other (the checker then
	// reports a deadlock).
	Now func() time.Time
	// Resolve is the checker's plan resolver, for Checker.Plans.
	Resolve floodgate.PlanResolver
	// Prefix is a namespace of this program's own (a Redis prefix), so
	// that programs and earlier runs never meet in a shared store.
	Prefix string
	// Instance is which of the program's instances this is, from 0.
	Instance int
}

// envFull reports whether FLOODGATE_FULL asks for the long runs.
func envFull() bool { return os.Getenv("FLOODGATE_FULL") == "1" }

// Check drives the limiter c describes with concurrent random operations
// and checks what it did: every history against a sequential model of
// the limiter (a linearizability check, key by key), and against
// invariants that hold for any history (see the package documentation,
// "The concurrency checker"). It runs programs, each from a seed, for
// c.Budget: the seeds 1, 2 and 3, then random ones. A failing program is
// shrunk to a short one and the test fails with the violation, the seed
// (FLOODGATE_CHECK_SEED=seed replays it alone) and a repro test to paste.
func Check(t *testing.T, c Checker) {
	t.Helper()
	ch, err := c.prepare()
	if err != nil {
		t.Fatalf("floodgatetest: %s: %v", c.Name, err)
	}
	seeds := []uint64{1, 2, 3}
	fixed := true
	if s := os.Getenv("FLOODGATE_CHECK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("FLOODGATE_CHECK_SEED=%q: %v", s, err)
		}
		seeds, fixed = []uint64{v}, false
	}
	began := time.Now()
	deadline := began.Add(ch.Budget)
	programs, ops := 0, 0
	for i := 0; ; i++ {
		var seed uint64
		switch {
		case i < len(seeds):
			seed = seeds[i]
		case fixed && time.Now().Before(deadline):
			seed = rand.Uint64() >> 16 // short enough to type
		default:
			t.Logf("%s: %d programs, %d operations, no violation (seeds %v, then random ones; FLOODGATE_CHECK_SEED=seed replays one)",
				ch.Name, programs, ops, seeds)
			return
		}
		for _, sched := range ch.schedulers() {
			p := ch.generate(seed, sched)
			f, err := ch.runProgram(t, p)
			if err != nil {
				t.Fatalf("floodgatetest: %s: %v", ch.Name, err)
			}
			programs++
			ops += p.size()
			if f != nil {
				took := time.Since(began) // before shrinking
				t.Fatalf("%v\n(the check had run %d programs, %d operations, for %.1f s when it failed)",
					ch.fail(t, p, f), programs, ops, took.Seconds())
			}
		}
	}
}

// Replay runs program p, as Check ran it when it found a failure, and
// fails t with the violation it finds. A program under the
// deterministic scheduler replays exactly (the limiter's own randomness,
// such as a store's hash seed, aside); a free-running one is tried up to
// 20 times, since its interleaving is the Go scheduler's.
func Replay(t *testing.T, c Checker, p Program) {
	t.Helper()
	ch, err := c.prepare()
	if err != nil {
		t.Fatalf("floodgatetest: %s: %v", c.Name, err)
	}
	tries := 1
	if !p.Deterministic {
		tries = 20
	}
	for range tries {
		f, err := ch.runProgram(t, p)
		if err != nil {
			t.Fatalf("floodgatetest: %s: %v", ch.Name, err)
		}
		if f != nil {
			t.Fatalf("%s: %s", ch.Name, f.report(p))
		}
	}
}

// Find is Check without a test: it runs the programs of seeds, each
// under the schedulers c names, and returns the first violation found,
// shrunk, or nil if there is none. An invalid Checker, or a New that
// fails, is an error.
func (c Checker) Find(seeds ...uint64) (*Failure, error) {
	ch, err := c.prepare()
	if err != nil {
		return nil, err
	}
	for _, seed := range seeds {
		for _, sched := range ch.schedulers() {
			p := ch.generate(seed, sched)
			f, err := ch.runProgram(discard{}, p)
			if err != nil {
				return nil, err
			}
			if f != nil {
				return ch.fail(discard{}, p, f), nil
			}
		}
	}
	return nil, nil
}

// Failure is a violation the checker found (Checker.Find).
type Failure struct {
	// Kind names the property violated, such as "no order of the calls
	// fits the sequential model (not linearizable)" or "more admitted in
	// an interval than the limit allows".
	Kind string
	// Details shows the calls that violate it, as the shrunk program
	// made them.
	Details string
	// Seed is the seed of the program that failed; Found its size, in
	// operations, and Program the shrunk program, which still fails.
	Seed    uint64
	Found   int
	Program Program
	// Repro is a Go test that replays Program with Replay.
	Repro string
}

func (f *Failure) String() string {
	return fmt.Sprintf("%s: %s\n\nfound from seed %d under the %s scheduler after %d operations, shrunk to %d operations (%d rounds); FLOODGATE_CHECK_SEED=%d replays the original\n\nrepro test, to paste beside the test that runs Check:\n\n%s",
		f.Kind, f.Details, f.Seed, schedName(f.Program.Deterministic), f.Found, f.Program.size(), len(f.Program.Rounds), f.Seed, f.Repro)
}

// prepare checks c, fills in its defaults and learns what its limiter
// supports.
func (c Checker) prepare() (*checker, error) {
	ch, err := c.normalize()
	if err != nil {
		return nil, fmt.Errorf("invalid Checker: %w", err)
	}
	if ch.caps, err = ch.probe(); err != nil {
		return nil, err
	}
	return ch, nil
}

// checker is a Checker with its defaults filled in.
type checker struct {
	Checker
	models modelFactory
	caps   caps
}

func (c Checker) normalize() (*checker, error) {
	switch {
	case c.New == nil:
		return nil, errors.New("Checker.New is nil")
	case len(c.Parts) == 0 && c.Algorithm == 0:
		return nil, errors.New("Checker.Algorithm is zero and there are no Parts")
	case len(c.Parts) > 0 && len(c.Plans) > 0:
		return nil, errors.New("Checker.Parts and Checker.Plans do not combine")
	case c.Resolution < 0 || c.Resolution > time.Millisecond || (c.Resolution > 0 && time.Millisecond%c.Resolution != 0):
		return nil, fmt.Errorf("Checker.Resolution %v must divide 1ms", c.Resolution)
	}
	if c.Algorithm != 0 && !c.Algorithm.exact() && c.Algorithm != InFlightSlots {
		return nil, fmt.Errorf("unknown %v", c.Algorithm)
	}
	if len(c.Plans) == 0 && len(c.Parts) == 0 {
		if err := c.Rate.Validate(); err != nil {
			return nil, fmt.Errorf("Checker.Rate: %w", err)
		}
	}
	caps := map[int]bool{}
	for _, p := range c.Plans {
		cp := planSetup(c.Algorithm, p).capacity()
		if caps[cp] {
			return nil, fmt.Errorf("two plans have capacity %d: Decision.Limit must tell the plans apart", cp)
		}
		caps[cp] = true
	}
	if c.Name == "" {
		c.Name = "limiter"
	}
	if c.Source == "" {
		c.Source = "checker"
	}
	c.Instances = max(c.Instances, 1)
	if c.Keys <= 0 {
		c.Keys = 4
		if c.MaxKeys > 0 {
			c.Keys = 8 * c.MaxKeys
		}
	}
	c.Workers = or(c.Workers, 4)
	c.Rounds = or(c.Rounds, 40)
	if c.Budget <= 0 {
		c.Budget = time.Second
		if envFull() {
			c.Budget = 20 * time.Second
		}
	}
	if len(c.Inherits) == 0 {
		c.Inherits = []floodgate.Inherit{floodgate.KeepUsed, floodgate.ScaleUsed, floodgate.AddDifference, floodgate.StartFresh}
	}
	if c.Gate != nil && c.Gate.Wait != nil || c.Instances > 1 {
		c.Scheduler = FreeRunning
	}
	ch := &checker{Checker: c}
	ch.models = ch.modelFactory()
	if len(c.Rates) == 0 && len(c.Parts) == 0 && len(c.Plans) == 0 && c.Algorithm != InFlightSlots {
		ch.Rates = ch.defaultRates()
	}
	return ch, nil
}

func or(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// schedulers returns the schedulers each seed runs under.
func (c *checker) schedulers() []Scheduler {
	if c.Scheduler == BothSchedulers {
		return []Scheduler{Deterministic, FreeRunning}
	}
	return []Scheduler{c.Scheduler}
}

// defaultRates returns the changes SetRate tries: twice and half the
// limit, twice and half the period, a larger burst for a bucket, and the
// rate the limiter was built with.
func (c *checker) defaultRates() []floodgate.RateChange {
	r, b := c.Rate, c.Burst
	bucket := c.Algorithm.bucket()
	mk := func(limit int, period time.Duration, burst int) floodgate.RateChange {
		rc := floodgate.RateChange{Rate: floodgate.Rate{Limit: max(limit, 1), Period: period}}
		if bucket && b > 0 {
			rc.Burst = max(burst, 1)
		}
		return rc
	}
	out := []floodgate.RateChange{
		mk(r.Limit, r.Period, b),
		mk(2*r.Limit, r.Period, 2*b),
		mk(r.Limit/2, r.Period, b/2),
		mk(r.Limit, 2*r.Period, b),
		mk(r.Limit, r.Period/2, b),
	}
	if bucket {
		out = append(out, floodgate.RateChange{Rate: r, Burst: max(b, r.Limit) + 3})
	}
	return out
}

// fail shrinks the failing program p and returns the Failure to report.
func (c *checker) fail(log logger, p Program, f *failure) *Failure {
	small, sf := c.shrink(log, p, f)
	return &Failure{Kind: sf.kind, Details: sf.msg, Seed: p.Seed, Found: p.size(), Program: small,
		Repro: c.reproTest(small, sf)}
}

func schedName(det bool) string {
	if det {
		return Deterministic.String()
	}
	return FreeRunning.String()
}
