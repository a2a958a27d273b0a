package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A suite that cannot fail proves nothing. These tests run it, through a
// recorder standing in for *testing.T, against a limiter built from the
// models themselves — which must pass — and against deliberately broken
// variants of it, each of which must fail the check aimed at its bug.

// recorder is a tester that notes failures instead of reporting them, so a
// test can require the suite to fail. Like testing, it runs each subtest
// on its own goroutine so that Fatal can end it with runtime.Goexit.
type recorder struct {
	testing.TB // the real test: Helper, Cleanup, TempDir
	name       string
	failures   *failures
	mu         sync.Mutex
	failed     bool
}

type failures struct {
	mu   sync.Mutex
	msgs []string // "subtest/name: message"
}

func (f *failures) add(name, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, name+": "+msg)
}

// in reports whether a subtest of the named check failed.
func (f *failures) in(check string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.msgs, func(m string) bool { return strings.HasPrefix(m, check+"/") })
}

func (f *failures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// record runs the suite (only the checks named, if any) under a recorder
// and returns what failed.
func record(t *testing.T, s Suite, only ...string) *failures {
	root := &recorder{TB: t, failures: &failures{}}
	root.run("", func(r tester) { s.run(r, only...) })
	return root.failures
}

func (r *recorder) fail(msg string) {
	r.failures.add(r.name, msg)
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *recorder) Name() string                 { return r.name }
func (r *recorder) Error(args ...any)            { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, args ...any) { r.fail(fmt.Sprintf(f, args...)) }
func (r *recorder) Fail()                        { r.fail("Fail") }
func (r *recorder) FailNow()                     { r.Fail(); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)            { r.Error(args...); runtime.Goexit() }
func (r *recorder) Fatalf(f string, args ...any) { r.Errorf(f, args...); runtime.Goexit() }
func (r *recorder) Skip(args ...any)             { r.Fatal(append([]any{"skipped: "}, args...)...) }
func (r *recorder) Skipf(f string, args ...any)  { r.Fatalf("skipped: "+f, args...) }
func (r *recorder) SkipNow()                     { r.Fatal("skipped") }
func (r *recorder) Log(...any)                   {}
func (r *recorder) Logf(string, ...any)          {}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) run(name string, f func(t tester)) bool {
	child := &recorder{TB: r.TB, name: strings.TrimPrefix(r.name+"/"+name, "/"), failures: r.failures}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(child)
	}()
	<-done
	if child.Failed() {
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
	}
	return !child.Failed()
}

// modelLimiter is a Limiter made of the suite's own models, one per key,
// behind a mutex. Its hooks break it in controlled ways.
type modelLimiter struct {
	mu       sync.Mutex
	clock    *Clock
	start    time.Time
	newModel func() model
	models   map[string]model

	// Bugs. Each is nil or false in a correct limiter.
	key     func(string) string                                                        // maps a key before lookup
	before  func(m model, now time.Duration, n int) int                                // may act first; returns the cost to decide
	after   func(m model, now time.Duration, n int, d *floodgate.Decision, err *error) // edits the result
	noReset bool
	change  func(m model, now time.Duration, to setup, how floodgate.Inherit) // replaces the conversion
	alg     Algorithm
}

func newModelLimiter(alg Algorithm, c Config) *modelLimiter {
	l := &modelLimiter{clock: c.Clock, start: c.Clock.Now(), models: map[string]model{}}
	l.newModel = func() model { return modelFor(alg, setup{rate: c.Rate, burst: c.Burst}, 0) }
	l.alg = alg
	return l
}

// SetRate converts every model at once, as the in-memory limiters do.
func (l *modelLimiter) SetRate(_ context.Context, c floodgate.RateChange) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	to := setup{rate: c.Rate, burst: c.Burst}
	if l.alg.bucket() && to.burst == 0 {
		to.burst = c.Rate.Limit
	}
	now := l.clock.Now().Sub(l.start)
	for _, m := range l.models {
		if l.change != nil {
			l.change(m, now, to, c.Inherit)
		} else {
			m.change(now, to, c.Inherit)
		}
	}
	alg := l.alg
	l.newModel = func() model { return modelFor(alg, to, 0) }
	return nil
}

func (l *modelLimiter) AllowN(_ context.Context, key string, n int) (floodgate.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key != nil {
		key = l.key(key)
	}
	m := l.models[key]
	if m == nil {
		m = l.newModel()
		l.models[key] = m
	}
	now := l.clock.Now().Sub(l.start)
	if l.before != nil {
		n = l.before(m, now, n)
	}
	d, err := m.allowN(now, n)
	if l.after != nil {
		l.after(m, now, n, &d, &err)
	}
	return d, err
}

func (l *modelLimiter) Reset(_ context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key != nil {
		key = l.key(key)
	}
	if !l.noReset {
		delete(l.models, key)
	}
	return nil
}

// modelSuite returns a suite over modelLimiters, each broken by bug.
func modelSuite(alg, model Algorithm, bursts bool, bug func(l *modelLimiter, c Config)) Suite {
	return Suite{
		Algorithm: alg,
		Bursts:    bursts,
		New: func(c Config) (Limiter, error) {
			if model.bucket() && c.Burst == 0 {
				c.Burst = c.Rate.Limit
			}
			l := newModelLimiter(model, c)
			if bug != nil {
				bug(l, c)
			}
			return l, nil
		},
	}
}

func TestSuitePassesTheModels(t *testing.T) {
	tests := []struct {
		name       string
		alg, model Algorithm
		bursts     bool
	}{
		{"token bucket", TokenBucket, TokenBucket, false},
		{"token bucket with bursts", TokenBucket, TokenBucket, true},
		{"sliding log", SlidingLog, SlidingLog, false},
		{"sliding counter", SlidingCounter, SlidingCounter, false},
		{"interval token bucket", IntervalTokenBucket, IntervalTokenBucket, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if f := record(t, modelSuite(tt.alg, tt.model, tt.bursts, nil)); f.String() != "" {
				t.Fatalf("the suite failed its own model:\n%s", f)
			}
		})
	}
}

// costCap returns the capacity the limiter was built for.
func costCap(c Config) int {
	if c.Burst > 0 {
		return c.Burst
	}
	return c.Rate.Limit
}

func TestSuiteCatchesBrokenLimiters(t *testing.T) {
	const ms = time.Millisecond
	oneTooMany := func(l *modelLimiter, c Config) {
		bigger := c
		if c.Burst > 0 {
			bigger.Burst++
		} else {
			bigger.Rate.Limit++
		}
		l.newModel = newModelLimiter(l.alg, bigger).newModel
		l.after = func(_ model, _ time.Duration, _ int, d *floodgate.Decision, _ *error) {
			d.Limit--
			d.Remaining = max(0, d.Remaining-1)
		}
	}
	editDecision := func(edit func(d *floodgate.Decision, n int)) func(*modelLimiter, Config) {
		return func(l *modelLimiter, _ Config) {
			l.after = func(_ model, _ time.Duration, n int, d *floodgate.Decision, err *error) {
				if *err == nil {
					edit(d, n)
				}
			}
		}
	}
	tests := []struct {
		name       string
		alg, model Algorithm
		bug        func(l *modelLimiter, c Config)
		wantFailed []string // checks that must report a failure
	}{
		{
			name: "token bucket allowing one event too many", alg: TokenBucket, model: TokenBucket,
			bug: oneTooMany, wantFailed: []string{"Timeline", "RandomTraffic", "Reset", "IndependentKeys", "Concurrent"},
		},
		{
			name: "sliding log allowing one event too many", alg: SlidingLog, model: SlidingLog,
			bug: oneTooMany, wantFailed: []string{"Timeline", "RandomTraffic", "Reset", "IndependentKeys", "Concurrent"},
		},
		{
			name: "counter allowing one event too many", alg: SlidingCounter, model: SlidingCounter,
			bug: oneTooMany, wantFailed: []string{"Reset", "IndependentKeys", "Concurrent", "ZeroCost"},
		},
		{
			// The classic integer GCRA: Period/Limit truncated to whole ns.
			name: "token bucket with a truncated emission interval", alg: TokenBucket, model: TokenBucket,
			bug: func(l *modelLimiter, c Config) {
				emission := ratInt(int64(c.Rate.Period) / int64(c.Rate.Limit))
				l.newModel = func() model {
					return &tokenBucketModel{burst: c.Burst, emission: emission,
						tau: new(big.Rat).Mul(emission, ratInt(int64(c.Burst)))}
				}
			},
			wantFailed: []string{"Timeline", "RandomTraffic"},
		},
		{
			name: "RetryAfter 1ns short", alg: TokenBucket, model: TokenBucket,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.RetryAfter > 1 {
					d.RetryAfter--
				}
			}),
			wantFailed: []string{"Timeline", "RetryAfter"},
		},
		{
			name: "RetryAfter 1ms short", alg: SlidingCounter, model: SlidingCounter,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.RetryAfter > ms {
					d.RetryAfter -= ms
				}
			}),
			wantFailed: []string{"RetryAfter"},
		},
		{
			name: "RetryAfter 1ms long", alg: SlidingLog, model: SlidingLog,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.RetryAfter > 0 {
					d.RetryAfter += ms
				}
			}),
			wantFailed: []string{"Timeline", "RetryAfter"},
		},
		{
			name: "RetryAfter 1ms long", alg: SlidingCounter, model: SlidingCounter,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.RetryAfter > 0 {
					d.RetryAfter += ms
				}
			}),
			wantFailed: []string{"RetryAfter"},
		},
		{
			name: "ResetAfter 1ms short", alg: TokenBucket, model: TokenBucket,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.ResetAfter > ms {
					d.ResetAfter -= ms
				}
			}),
			wantFailed: []string{"Timeline", "ResetAfter"},
		},
		{
			name: "ResetAfter 1ms long", alg: SlidingLog, model: SlidingLog,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.ResetAfter > 0 {
					d.ResetAfter += ms
				}
			}),
			wantFailed: []string{"Timeline", "ResetAfter"},
		},
		{
			name: "Remaining negative after a denial", alg: SlidingCounter, model: SlidingCounter,
			bug: editDecision(func(d *floodgate.Decision, n int) {
				if !d.Allowed {
					d.Remaining -= n
				}
			}),
			wantFailed: []string{"RetryAfter", "Reset", "IndependentKeys"},
		},
		{
			name: "Remaining above the limit on a fresh key", alg: SlidingCounter, model: SlidingCounter,
			bug: editDecision(func(d *floodgate.Decision, _ int) {
				if d.Remaining == d.Limit {
					d.Remaining++
				}
			}),
			wantFailed: []string{"ZeroCost", "Reset", "IndependentKeys"},
		},
		{
			name: "n == 0 consumes a unit", alg: TokenBucket, model: TokenBucket,
			bug: func(l *modelLimiter, _ Config) {
				l.before = func(m model, now time.Duration, n int) int {
					if n == 0 {
						_, _ = m.allowN(now, 1)
					}
					return n
				}
			},
			wantFailed: []string{"ZeroCost"},
		},
		{
			name: "impossible cost given a finite RetryAfter", alg: SlidingLog, model: SlidingLog,
			bug: func(l *modelLimiter, c Config) {
				l.after = func(_ model, _ time.Duration, _ int, d *floodgate.Decision, err *error) {
					if errors.Is(*err, floodgate.ErrCostExceedsLimit) {
						d.RetryAfter = c.Rate.Period
					}
				}
			},
			wantFailed: []string{"CostExceedsLimit"},
		},
		{
			name: "impossible cost reported as an ordinary denial", alg: SlidingCounter, model: SlidingCounter,
			bug: func(l *modelLimiter, c Config) {
				l.after = func(_ model, _ time.Duration, _ int, d *floodgate.Decision, err *error) {
					if errors.Is(*err, floodgate.ErrCostExceedsLimit) {
						*err = nil
						*d = floodgate.Decision{Limit: costCap(c), RetryAfter: c.Rate.Period}
					}
				}
			},
			wantFailed: []string{"CostExceedsLimit"},
		},
		{
			name: "negative cost taken as zero", alg: TokenBucket, model: TokenBucket,
			bug: func(l *modelLimiter, _ Config) {
				l.before = func(_ model, _ time.Duration, n int) int { return max(n, 0) }
			},
			wantFailed: []string{"NegativeCost"},
		},
		{
			name: "Reset does nothing", alg: SlidingLog, model: SlidingLog,
			bug:        func(l *modelLimiter, _ Config) { l.noReset = true },
			wantFailed: []string{"Reset"},
		},
		{
			name: "keys compared without case", alg: TokenBucket, model: TokenBucket,
			bug:        func(l *modelLimiter, _ Config) { l.key = strings.ToLower },
			wantFailed: []string{"IndependentKeys"},
		},
		{
			name: "keys cut at a NUL", alg: SlidingCounter, model: SlidingCounter,
			bug: func(l *modelLimiter, _ Config) {
				l.key = func(k string) string { k, _, _ = strings.Cut(k, "\x00"); return k }
			},
			wantFailed: []string{"IndependentKeys"},
		},
		{
			name: "sliding log recording denied events", alg: SlidingLog, model: SlidingLog,
			bug: func(l *modelLimiter, _ Config) {
				l.after = func(m model, now time.Duration, n int, d *floodgate.Decision, err *error) {
					if *err == nil && !d.Allowed {
						// Record the attempt and drop as many of the oldest
						// units, as a store counting denied attempts would.
						log := m.(*slidingLogModel)
						log.entries = append(log.entries, logEntry{now, n})
						for drop := n; drop > 0; {
							if e := &log.entries[0]; e.weight > drop {
								e.weight -= drop
								drop = 0
							} else {
								drop -= e.weight
								log.entries = log.entries[1:]
							}
						}
					}
				}
			},
			wantFailed: []string{"Timeline", "RandomTraffic"},
		},
		{
			name: "a change of rate that forgets every key", alg: TokenBucket, model: TokenBucket,
			bug: func(l *modelLimiter, _ Config) {
				l.change = func(m model, now time.Duration, to setup, _ floodgate.Inherit) {
					m.change(now, to, floodgate.StartFresh)
				}
			},
			wantFailed: []string{"RateChange"},
		},
		{
			name: "a change of rate that leaves tracked keys under the old one", alg: SlidingLog, model: SlidingLog,
			bug: func(l *modelLimiter, _ Config) {
				l.change = func(model, time.Duration, setup, floodgate.Inherit) {}
			},
			wantFailed: []string{"RateChange"},
		},
		{
			name: "a change of rate that scales what was used", alg: SlidingCounter, model: SlidingCounter,
			bug: func(l *modelLimiter, _ Config) {
				l.change = func(m model, now time.Duration, to setup, _ floodgate.Inherit) {
					m.change(now, to, floodgate.ScaleUsed)
				}
			},
			wantFailed: []string{"RateChange"},
		},
		{
			name: "a change of rate that keeps what was used", alg: IntervalTokenBucket, model: IntervalTokenBucket,
			bug: func(l *modelLimiter, _ Config) {
				l.change = func(m model, now time.Duration, to setup, _ floodgate.Inherit) {
					m.change(now, to, floodgate.KeepUsed)
				}
			},
			wantFailed: []string{"RateChange"},
		},
		{
			// Events counted for Period+1ms, durations reported as if not.
			name: "sliding log window 1ms too long", alg: SlidingLog, model: SlidingLog,
			bug: func(l *modelLimiter, c Config) {
				longer := c
				longer.Rate.Period += ms
				l.newModel = newModelLimiter(SlidingLog, longer).newModel
				l.after = func(_ model, _ time.Duration, _ int, d *floodgate.Decision, err *error) {
					if *err == nil {
						d.RetryAfter = max(0, d.RetryAfter-ms)
						d.ResetAfter = max(0, d.ResetAfter-ms)
					}
				}
			},
			wantFailed: []string{"Timeline", "RetryAfter", "ResetAfter"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := record(t, modelSuite(tt.alg, tt.model, false, tt.bug), tt.wantFailed...)
			for _, check := range tt.wantFailed {
				if !f.in(check) {
					t.Errorf("%s did not fail; failures:\n%s", check, f)
				}
			}
		})
	}
}

func TestSuiteRefusesInvalidSuites(t *testing.T) {
	valid := modelSuite(TokenBucket, TokenBucket, false, nil)
	tests := []struct {
		name string
		edit func(s *Suite)
	}{
		{"no algorithm", func(s *Suite) { s.Algorithm = 0 }},
		{"no factory", func(s *Suite) { s.New = nil }},
		{"bursts on a sliding log", func(s *Suite) { s.Algorithm, s.Bursts = SlidingLog, true }},
		{"resolution above 1ms", func(s *Suite) { s.Resolution = 2 * time.Millisecond }},
		{"resolution not dividing 1ms", func(s *Suite) { s.Resolution = 3 * time.Microsecond }},
		{"negative resolution", func(s *Suite) { s.Resolution = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid
			tt.edit(&s)
			f := record(t, s)
			if !strings.HasPrefix(f.String(), ": floodgatetest: invalid suite") {
				t.Fatalf("failures %q, want the suite refused", f)
			}
		})
	}
}

func TestSuiteReportsFactoryErrors(t *testing.T) {
	s := Suite{Algorithm: SlidingLog, New: func(Config) (Limiter, error) { return nil, errors.New("no store") }}
	if f := record(t, s); !strings.Contains(f.String(), "no store") {
		t.Fatalf("failures %q, want the factory's error", f)
	}
}

// A limiter that rounds its durations up to microseconds, as a store
// keeping microseconds does, passes when it says so and only then.
func TestSuiteResolution(t *testing.T) {
	roundUp := func(d time.Duration) time.Duration {
		if r := d % time.Microsecond; r > 0 {
			d += time.Microsecond - r
		}
		return d
	}
	s := modelSuite(TokenBucket, TokenBucket, true, func(l *modelLimiter, _ Config) {
		l.after = func(_ model, _ time.Duration, _ int, d *floodgate.Decision, _ *error) {
			d.RetryAfter, d.ResetAfter = roundUp(d.RetryAfter), roundUp(d.ResetAfter)
		}
	})
	if f := record(t, s, "Timeline"); !f.in("Timeline") {
		t.Errorf("rounded durations passed as exact; failures:\n%s", f)
	}
	s.Resolution = time.Microsecond
	if f := record(t, s); f.String() != "" {
		t.Errorf("rounded durations failed with Resolution 1µs:\n%s", f)
	}
}
