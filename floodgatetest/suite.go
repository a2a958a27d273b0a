package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Algorithm names the semantics a limiter under test promises. The suite
// holds a reference model of each and compares every decision with it,
// besides checking what every Limiter promises.
type Algorithm int

const (
	// TokenBucket is a greedy token bucket (floodgate.NewTokenBucket): a
	// capacity of Config.Burst tokens, refilled continuously at Rate.Limit
	// per Rate.Period, exact to the nanosecond (GCRA).
	TokenBucket Algorithm = iota + 1
	// SlidingLog is an exact sliding window (floodgate.NewSlidingLog): at
	// most Rate.Limit events in any window (now-Period, now], denied
	// events not recorded.
	SlidingLog
	// SlidingCounter is the two-window weighted estimate
	// (floodgate.NewSlidingCounter): fixed windows of Rate.Period from the
	// clock's start, the previous window's count weighted by the share of
	// it still in the sliding window. It approximates a sliding log, but
	// is itself deterministic, so the suite holds a model of it.
	SlidingCounter
	// IntervalTokenBucket is a token bucket refilled intervally
	// (floodgate.WithIntervalRefill): a capacity of Config.Burst tokens,
	// Rate.Limit of which come back at once each Rate.Period, periods
	// counted from a key's first event after its bucket was last full.
	IntervalTokenBucket
)

// String returns the algorithm's name.
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "TokenBucket"
	case SlidingLog:
		return "SlidingLog"
	case SlidingCounter:
		return "SlidingCounter"
	case IntervalTokenBucket:
		return "IntervalTokenBucket"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// exact reports whether the suite has a reference model for a: for
// every algorithm it knows.
func (a Algorithm) exact() bool { return a >= TokenBucket && a <= IntervalTokenBucket }

// bucket reports whether a has a burst.
func (a Algorithm) bucket() bool { return a == TokenBucket || a == IntervalTokenBucket }

// Limiter is what the suite tests: a floodgate.Limiter that can also reset
// a key.
type Limiter interface {
	floodgate.Limiter
	floodgate.Resetter
}

// Config is what the suite asks a factory to build.
type Config struct {
	// Rate is the quota under test.
	Rate floodgate.Rate
	// Burst is the capacity of a TokenBucket or an IntervalTokenBucket
	// (floodgate.WithBurst). It equals Rate.Limit unless Suite.Bursts is
	// set, and is zero for the other algorithms.
	Burst int
	// Clock is the limiter's only source of time (floodgate.WithClock with
	// Clock.Now). It starts at a fixed instant on a whole second and the
	// suite only ever moves it forward.
	Clock *Clock
}

// Suite describes the limiter to test. Run it with Run.
type Suite struct {
	// Algorithm is the semantics the limiter promises. Required.
	Algorithm Algorithm
	// New returns a new limiter for c that reads the time only from
	// c.Clock. Required. It is called many times, once per subtest, and
	// the limiters it returns may share a store: each subtest uses keys of
	// its own, under a random prefix per run, so state left in a shared
	// store (a Redis) by other subtests or earlier runs does not matter.
	New func(c Config) (Limiter, error)
	// Bursts makes the suite also test token-bucket capacities other than
	// Rate.Limit, passed in Config.Burst; the factory must then honour it
	// (floodgate.WithBurst). Leave it false for a factory that does not,
	// and Config.Burst always equals Rate.Limit. Only for the token
	// buckets.
	Bursts bool
	// RateChangeOnNextDecision says that the limiter converts a key to a
	// new rate (floodgate.RateSetter) when it next decides for it, from
	// the rate it last decided under, as of the latest change, rather
	// than every key at the change (as the in-memory limiters do). Both
	// agree for every key decided for between two changes; a key left
	// alone through two changes or more is converted once, from its old
	// rate straight to the newest. The suite's models follow suit. The
	// Redis limiters set it.
	RateChangeOnNextDecision bool
	// Lossy says that the limiter may allow less than the model, by
	// design: it loses quota now and then, as a leased limiter does when
	// a unit it leased is never used (redisstore.WithLease). The suite
	// then compares no decision with the model, holds every one to the
	// rules a decision obeys, and skips the checks that need a model.
	Lossy bool
	// Resolution is the unit to which the limiter rounds the durations it
	// reports (RetryAfter, ResetAfter) up; zero means one nanosecond: the
	// durations must be exact. A store that keeps time in microseconds,
	// as Redis does, sets time.Microsecond: the model's durations are then
	// rounded up likewise before they are compared. It must divide one
	// millisecond.
	Resolution time.Duration
}

// epoch is where every Clock the suite hands out starts: fixed, so runs
// are reproducible, and on a whole second, so that the millisecond grid
// the suite moves on is the same in any unit a store counts time in.
var epoch = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// never is the RetryAfter a limiter may give, besides zero, for a request
// that can never succeed.
const never = time.Duration(math.MaxInt64)

func (s *Suite) validate() error {
	switch {
	case !s.Algorithm.exact():
		return fmt.Errorf("unknown %v", s.Algorithm)
	case s.New == nil:
		return errors.New("Suite.New is nil")
	case s.Bursts && !s.Algorithm.bucket():
		return fmt.Errorf("Suite.Bursts applies to a token bucket, not a %v", s.Algorithm)
	case s.Resolution < 0 || s.Resolution > time.Millisecond ||
		(s.Resolution > 0 && time.Millisecond%s.Resolution != 0):
		return fmt.Errorf("Suite.Resolution %v must divide 1ms", s.Resolution)
	}
	return nil
}

// Run runs the conformance suite against s.New as subtests of t. See the
// package documentation for what it checks.
func Run(t *testing.T, s Suite) {
	t.Helper()
	s.run(testingT{t})
}

// tester is the part of *testing.T the suite uses. Its own tests put a
// recorder in its place to watch the suite fail on broken limiters.
type tester interface {
	testing.TB
	run(name string, f func(t tester)) bool
}

type testingT struct{ *testing.T }

func (t testingT) run(name string, f func(t tester)) bool {
	return t.Run(name, func(t *testing.T) { f(testingT{t}) })
}

// setup is one configuration the suite tests: a rate and, for a token
// bucket, a capacity.
type setup struct {
	rate  floodgate.Rate
	burst int // 0 except for a token bucket
}

// capacity is the largest cost that can ever be allowed, which is also
// Decision.Limit.
func (c setup) capacity() int {
	if c.burst > 0 {
		return c.burst
	}
	return c.rate.Limit
}

func (c setup) String() string {
	name := fmt.Sprintf("%d_per_%v", c.rate.Limit, c.rate.Period)
	if c.burst > 0 && c.burst != c.rate.Limit {
		name += fmt.Sprintf("_burst_%d", c.burst)
	}
	return name
}

// setups lists the configurations every check runs on. Every period is a
// whole number of milliseconds, and several do not divide by their limit,
// so that exact arithmetic matters.
func (s *Suite) setups() []setup {
	rates := []floodgate.Rate{
		{Limit: 3, Period: time.Second},
		{Limit: 7, Period: 10 * time.Minute},
		{Limit: 10, Period: 10 * time.Minute}, // the username probe
		{Limit: 5, Period: time.Minute},       // the sign-up pattern
		{Limit: 1, Period: time.Second},
		{Limit: 12, Period: 1001 * time.Millisecond},
		{Limit: 40, Period: time.Hour}, // room for many concurrent callers
	}
	var out []setup
	for _, r := range rates {
		c := setup{rate: r}
		if s.Algorithm.bucket() {
			c.burst = r.Limit
		}
		out = append(out, c)
	}
	if s.Bursts {
		out = append(out,
			setup{rate: floodgate.Rate{Limit: 3, Period: time.Second}, burst: 1},
			setup{rate: floodgate.Rate{Limit: 3, Period: time.Second}, burst: 8},
			setup{rate: floodgate.Rate{Limit: 7, Period: 10 * time.Minute}, burst: 2},
			setup{rate: floodgate.Rate{Limit: 10, Period: 10 * time.Minute}, burst: 25},
		)
	}
	return out
}

// run runs the checks named in only, or all of them if only is empty.
func (s *Suite) run(t tester, only ...string) {
	t.Helper()
	if err := s.validate(); err != nil {
		t.Fatalf("floodgatetest: invalid suite: %v", err)
	}
	ks := &keySpace{prefix: fmt.Sprintf("floodgatetest-%016x", rand.Uint64())}
	checks := []struct {
		name  string
		exact bool // needs a reference model
		check func(e *env)
	}{
		{"Timeline", true, checkTimeline},
		{"RandomTraffic", false, checkRandomTraffic},
		{"RetryAfter", false, checkRetryAfter},
		{"ResetAfter", false, checkResetAfter},
		{"CostExceedsLimit", false, checkCostExceedsLimit},
		{"NegativeCost", false, checkNegativeCost},
		{"ZeroCost", false, checkZeroCost},
		{"Reset", false, checkReset},
		{"IndependentKeys", false, checkIndependentKeys},
		{"Concurrent", false, checkConcurrent},
		{"RateChange", true, checkRateChange},
	}
	for _, c := range checks {
		if (c.exact && (!s.Algorithm.exact() || s.Lossy)) || (len(only) > 0 && !slices.Contains(only, c.name)) {
			continue
		}
		t.run(c.name, func(t tester) {
			for _, cfg := range s.setups() {
				t.run(cfg.String(), func(t tester) {
					c.check(s.newEnv(t, ks, cfg))
				})
			}
		})
	}
}

// keySpace hands out keys no other subtest, and no earlier run on a shared
// store, has used.
type keySpace struct {
	prefix string
	seq    atomic.Uint64
}

func (k *keySpace) key(label string) string {
	return fmt.Sprintf("%s:%d:%s", k.prefix, k.seq.Add(1), label)
}

// env is one subtest's limiter, its clock and the reference models of the
// keys it has used.
type env struct {
	t      tester
	suite  *Suite
	cfg    setup
	clock  *Clock
	lim    Limiter
	keys   *keySpace
	models map[string]model // nil when the algorithm has no model
	// version counts the rate changes made; versions and pending are
	// for Suite.RateChangeOnNextDecision: the version each model is at,
	// and the latest change, applied to a model when its key is next
	// decided for.
	version  int
	versions map[string]int
	pending  rateChange
	labels   map[string]string
	step     string // where in a sequence the subtest is, for messages
	ctx      context.Context
}

func (s *Suite) newEnv(t tester, ks *keySpace, cfg setup) *env {
	t.Helper()
	e := &env{
		t:      t,
		suite:  s,
		cfg:    cfg,
		clock:  NewClock(epoch),
		keys:   ks,
		labels: map[string]string{},
		ctx:    context.Background(),
	}
	if s.Algorithm.exact() && !s.Lossy {
		e.models, e.versions = map[string]model{}, map[string]int{}
	}
	lim, err := s.New(Config{Rate: cfg.rate, Burst: cfg.burst, Clock: e.clock})
	if err != nil {
		t.Fatalf("New(%v): %v", cfg, err)
	}
	if lim == nil {
		t.Fatalf("New(%v) returned a nil limiter and no error", cfg)
	}
	e.lim = lim
	return e
}

// key returns a fresh key, remembered under label for messages.
func (e *env) key(label string) string {
	k := e.keys.key(label)
	e.labels[k] = label
	return k
}

// now is the time since the clock's start: the models' time.
func (e *env) now() time.Duration { return e.clock.Now().Sub(epoch) }

func (e *env) advance(d time.Duration) { e.clock.Advance(d) }

func (e *env) where(key string, n int) string {
	w := fmt.Sprintf("at t0+%v, key %q, n=%d", e.now(), e.labels[key], n)
	if e.step != "" {
		w = e.step + ", " + w
	}
	return w
}

func (e *env) model(key string) model {
	if e.models == nil {
		return nil
	}
	m := e.models[key]
	switch {
	case m == nil:
		m = e.newModel()
		e.models[key], e.versions[key] = m, e.version
	case e.versions[key] < e.version:
		m.change(e.pending.at, e.pending.to, e.pending.how)
		e.versions[key] = e.version
	}
	return m
}

// exact reports whether the env compares with a model.
func (e *env) exact() bool { return e.models != nil }

func (e *env) newModel() model { return modelFor(e.suite.Algorithm, e.cfg, e.suite.Resolution) }

// modelFor returns a fresh model of alg for c; res is the resolution of
// the store's time (see Suite.Resolution).
func modelFor(alg Algorithm, c setup, res time.Duration) model {
	switch alg {
	case TokenBucket:
		return newTokenBucketModel(c.rate, c.burst, res)
	case IntervalTokenBucket:
		return newIntervalBucketModel(c.rate, c.burst)
	case SlidingCounter:
		return newSlidingCounterModel(c.rate)
	}
	return newSlidingLogModel(c.rate)
}

// allow asks the limiter for n units of key, checks the answer against
// every rule a decision obeys and, when there is a model, against the
// model's decision, and returns it. A disagreement with the model ends the
// subtest: every later step would follow from a different state.
func (e *env) allow(key string, n int) (floodgate.Decision, error) {
	e.t.Helper()
	got, err := e.lim.AllowN(e.ctx, key, n)
	e.checkDecision(e.where(key, n), n, got, err)
	if m := e.model(key); m != nil {
		want, wantErr := m.allowN(e.now(), n)
		want.RetryAfter = e.roundUp(want.RetryAfter)
		want.ResetAfter = e.roundUp(want.ResetAfter)
		switch {
		case wantErr != nil:
			if !errors.Is(err, wantErr) {
				e.t.Fatalf("%s: error %v, want one wrapping %v", e.where(key, n), err, wantErr)
			}
		case got != want:
			e.t.Fatalf("%s: decision differs from the %v model\n got %+v\nwant %+v",
				e.where(key, n), e.suite.Algorithm, got, want)
		}
	}
	return got, err
}

// mustAllow is allow for a request that must be allowed.
func (e *env) mustAllow(key string, n int) floodgate.Decision {
	e.t.Helper()
	d, err := e.allow(key, n)
	if err != nil || !d.Allowed {
		e.t.Fatalf("%s: got %+v, %v; want allowed", e.where(key, n), d, err)
	}
	return d
}

// mustDeny is allow for a request that must be denied without an error.
func (e *env) mustDeny(key string, n int) floodgate.Decision {
	e.t.Helper()
	d, err := e.allow(key, n)
	if err != nil || d.Allowed {
		e.t.Fatalf("%s: got %+v, %v; want denied", e.where(key, n), d, err)
	}
	return d
}

// mustFull checks, with a report (n == 0), that key has its whole quota.
func (e *env) mustFull(key string) {
	e.t.Helper()
	d, err := e.allow(key, 0)
	if err != nil || d.Remaining != e.cfg.capacity() || d.ResetAfter != 0 {
		e.t.Fatalf("%s: got %+v, %v; want the full quota (Remaining %d, ResetAfter 0)",
			e.where(key, 0), d, err, e.cfg.capacity())
	}
}

func (e *env) reset(key string) {
	e.t.Helper()
	if err := e.lim.Reset(e.ctx, key); err != nil {
		e.t.Fatalf("Reset(%q): %v", e.labels[key], err)
	}
	if m := e.model(key); m != nil {
		m.reset()
	}
}

func (e *env) roundUp(d time.Duration) time.Duration {
	r := e.suite.Resolution
	if r <= 1 || d%r == 0 {
		return d
	}
	return d - d%r + r
}

// checkDecision applies the rules every decision of every limiter obeys,
// model or not.
func (e *env) checkDecision(where string, n int, d floodgate.Decision, err error) {
	e.t.Helper()
	capacity := e.cfg.capacity()
	switch {
	case n < 0 || n > capacity:
		sentinel := floodgate.ErrCostExceedsLimit
		if n < 0 {
			sentinel = floodgate.ErrInvalidCost
		}
		if !errors.Is(err, sentinel) {
			e.t.Errorf("%s: error %v, want one wrapping %v", where, err, sentinel)
		}
		if d.Allowed {
			e.t.Errorf("%s: a request that can never succeed was allowed: %+v", where, d)
		}
		if d.RetryAfter != 0 && d.RetryAfter != never {
			e.t.Errorf("%s: RetryAfter %v for a request that can never succeed; want none (0)", where, d.RetryAfter)
		}
		return
	case err != nil:
		e.t.Fatalf("%s: unexpected error %v", where, err)
	}
	if d.Limit != capacity {
		e.t.Errorf("%s: Limit %d, want %d", where, d.Limit, capacity)
	}
	if d.Remaining < 0 || d.Remaining > d.Limit {
		e.t.Errorf("%s: Remaining %d outside [0, Limit %d]", where, d.Remaining, d.Limit)
	}
	if d.ResetAfter < 0 {
		e.t.Errorf("%s: negative ResetAfter %v", where, d.ResetAfter)
	}
	if d.Allowed && d.RetryAfter != 0 {
		e.t.Errorf("%s: allowed with RetryAfter %v, want 0", where, d.RetryAfter)
	}
	if !d.Allowed {
		if d.RetryAfter <= 0 {
			e.t.Errorf("%s: denied with RetryAfter %v, want a positive wait", where, d.RetryAfter)
		}
		if d.Remaining >= n {
			e.t.Errorf("%s: denied although Remaining %d covers n", where, d.Remaining)
		}
	}
}
