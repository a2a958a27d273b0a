package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A checker that cannot fail proves nothing. These tests run it against
// a limiter made of its own models behind one lock — linearizable by
// construction, which it must pass with every operation — and against
// deliberately broken variants, each of which it must catch from random
// operations alone.

// lockedModels is a limiter made of the checker's models, one per key,
// behind one mutex. Its bugs break it in controlled ways.
type lockedModels struct {
	mu     sync.Mutex
	now    func() time.Time
	last   time.Duration
	alg    Algorithm
	cur    setup
	cd     bool
	models map[string]checkModel

	// Bugs; all false in a correct limiter.
	forgetRefund bool // RefundN gives nothing back
	chargeTwice  bool // ChargeN charges twice
	racy         bool // AllowN looks, lets others run, then takes what it saw
	staleRate    bool // SetRate reaches a key only at its second decision after
	ignoreReset  bool // Reset changes nothing
	releaseTwice bool // ReleaseN gives back twice the slots
	stale        map[string]int
	pending      *rateChange
}

func newLockedModels(alg Algorithm, c CheckConfig) *lockedModels {
	s := setup{rate: c.Rate, burst: c.Burst}
	if alg.bucket() && s.burst == 0 {
		s.burst = c.Rate.Limit
	}
	return &lockedModels{now: c.Now, alg: alg, cur: s, cd: c.CountDenied, models: map[string]checkModel{}}
}

// at reads the clock outside the lock, as floodgate's limiters do, and
// holds it at the latest time seen under the lock.
func (l *lockedModels) at(read time.Time) time.Duration {
	now := read.Sub(epoch)
	if now < l.last {
		return l.last
	}
	l.last = now
	return now
}

func (l *lockedModels) model(key string, now time.Duration) checkModel {
	m := l.models[key]
	if m == nil {
		m = newCheckModel(l.alg, l.cur, l.cd, 0, floodgate.DebtLimits{})
		l.models[key] = m
	}
	if l.staleRate && l.pending != nil && l.stale[key] > 0 {
		if l.stale[key]--; l.stale[key] == 0 {
			m.change(l.pending.at, l.pending.to, l.pending.how)
		}
	}
	return m
}

func (l *lockedModels) AllowN(_ context.Context, key string, n int) (floodgate.Decision, error) {
	read := l.now()
	if l.racy && n > 0 {
		l.mu.Lock()
		now := l.at(read)
		look, _ := l.model(key, now).clone().allow(now, n)
		l.mu.Unlock()
		l.now() // a yield point between the look and the take
		if look.Allowed {
			l.mu.Lock()
			defer l.mu.Unlock()
			now := l.at(read)
			l.model(key, now).charge(now, n)
			return look, nil
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.at(read)
	return l.model(key, now).allow(now, n)
}

func (l *lockedModels) Reset(_ context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ignoreReset {
		return nil
	}
	delete(l.models, key)
	delete(l.stale, key)
	return nil
}

func (l *lockedModels) RefundN(_ context.Context, key string, n int) error {
	read := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.forgetRefund {
		now := l.at(read)
		l.model(key, now).refund(now, n)
	}
	return nil
}

func (l *lockedModels) ChargeN(_ context.Context, key string, n int) error {
	read := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.at(read)
	l.model(key, now).charge(now, n)
	if l.chargeTwice {
		l.model(key, now).charge(now, n)
	}
	return nil
}

func (l *lockedModels) SetRate(_ context.Context, c floodgate.RateChange) error {
	read := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.at(read)
	to := rateSetup(l.alg, c)
	if l.staleRate {
		l.pending, l.stale = &rateChange{at: now, to: to, how: c.Inherit}, map[string]int{}
		for k := range l.models {
			l.stale[k] = 2
		}
	} else {
		for _, m := range l.models {
			m.change(now, to, c.Inherit)
		}
	}
	l.cur = to
	return nil
}

// bookingModels adds booking ahead, for the token buckets.
type bookingModels struct{ *lockedModels }

func (l bookingModels) ReserveN(_ context.Context, key string, n int, maxWait time.Duration) (floodgate.Reservation, error) {
	read := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.at(read)
	return l.model(key, now).reserve(now, n, maxWait)
}

// slotModels is an in-flight limit of the checker's slot models.
type slotModels struct{ *lockedModels }

func (l slotModels) ReleaseN(_ context.Context, key string, n int, _ time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.model(key, 0).release(n)
	if l.releaseTwice {
		l.model(key, 0).release(n)
	}
	return nil
}

// lostLeaseSlots is an in-flight limit that says it lost lost leases of
// running calls, as redisstore.InFlight.LostLeases does.
type lostLeaseSlots struct {
	slotModels
	lost uint64
}

func (l lostLeaseSlots) LostLeases() uint64 { return l.lost }

// A program in which the limiter says it lost leases is not checked
// (Checker.SlotLease): the over-admission that follows is documented.
// The same broken limit that says it lost none is caught.
func TestCheckTrustsLostLeases(t *testing.T) {
	for _, lost := range []uint64{0, 1} {
		c := modelChecker(InFlightSlots, nil)
		c.SlotLease = time.Second
		c.New = func(cc CheckConfig) (floodgate.Limiter, error) {
			l := newLockedModels(InFlightSlots, cc)
			l.releaseTwice = true
			return lostLeaseSlots{slotModels{l}, lost}, nil
		}
		_, f := find(t, c, 10)
		switch {
		case lost == 0 && f == nil:
			t.Errorf("a limit that releases twice and lost no lease: the checker found nothing in 10 seeds")
		case lost > 0 && f != nil:
			t.Errorf("a limit that lost %d leases was held to the model: %s: %s", lost, f.kind, f.msg)
		}
	}
}

// modelChecker returns a Checker over lockedModels of alg, each broken
// by bug.
func modelChecker(alg Algorithm, bug func(*lockedModels)) Checker {
	return Checker{
		Name: "models of " + alg.String(), Algorithm: alg, Rate: floodgate.Rate{Limit: 5, Period: time.Second},
		New: func(c CheckConfig) (floodgate.Limiter, error) {
			l := newLockedModels(alg, c)
			if bug != nil {
				bug(l)
			}
			switch {
			case alg == InFlightSlots:
				return slotModels{l}, nil
			case alg.bucket():
				return bookingModels{l}, nil
			}
			return l, nil
		},
	}
}

// find runs c's programs, from the seeds 1 to seeds, until one fails,
// and returns its failure.
func find(t *testing.T, c Checker, seeds int) (Program, *failure) {
	t.Helper()
	ch, err := c.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if ch.caps, err = ch.probe(); err != nil {
		t.Fatal(err)
	}
	for seed := 1; seed <= seeds; seed++ {
		for _, sched := range ch.schedulers() {
			p := ch.generate(uint64(seed), sched)
			f, err := ch.runProgram(t, p)
			if err != nil {
				t.Fatal(err)
			}
			if f != nil {
				return p, f
			}
		}
	}
	return Program{}, nil
}

func TestCheckPassesTheModels(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, IntervalTokenBucket, SlidingLog, SlidingCounter, InFlightSlots} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			c := modelChecker(alg, nil)
			c.MovingClock = alg == TokenBucket
			if alg == SlidingLog || alg == SlidingCounter {
				// A window's charges beyond its limit last a window or
				// two, as documented: the bound rightly finds that debt
				// forgiven (issue 30 item 2).
				c.Without = Charges
			}
			if _, f := find(t, c, 6); f != nil {
				t.Fatalf("a limiter made of the models failed: %s", f.msg)
			}
		})
	}
	t.Run("SlidingLog/CountDenied", func(t *testing.T) {
		t.Parallel()
		c := modelChecker(SlidingLog, nil)
		c.CountDenied, c.Without = true, Charges
		if _, f := find(t, c, 6); f != nil {
			t.Fatalf("a limiter made of the models failed: %s", f.msg)
		}
	})
}

func TestCheckCatchesBrokenLimiters(t *testing.T) {
	tests := []struct {
		name string
		alg  Algorithm
		bug  func(*lockedModels)
		opts func(*Checker)
		want []string // failure kinds any of which it must report
	}{
		{
			name: "forgets a refund", alg: TokenBucket,
			bug:  func(l *lockedModels) { l.forgetRefund = true },
			opts: func(c *Checker) { c.Without = RateChanges | Charges | Reservations | Resets },
			want: []string{failLinear},
		},
		{
			name: "forgets a refund", alg: SlidingLog,
			bug:  func(l *lockedModels) { l.forgetRefund = true },
			opts: func(c *Checker) { c.Without = RateChanges | Charges | Resets },
			want: []string{failLinear},
		},
		{
			name: "charges twice", alg: SlidingCounter,
			bug:  func(l *lockedModels) { l.chargeTwice = true },
			opts: func(c *Checker) { c.Without = RateChanges | Refunds | Resets },
			want: []string{failLinear},
		},
		{
			name: "charges twice", alg: TokenBucket,
			bug:  func(l *lockedModels) { l.chargeTwice = true },
			opts: func(c *Checker) { c.Without = RateChanges | Refunds | Resets | Reservations },
			want: []string{failLinear},
		},
		{
			name: "admits one extra under a race", alg: TokenBucket,
			bug:  func(l *lockedModels) { l.racy = true },
			opts: func(c *Checker) { c.Without = RateChanges | Refunds | Charges | Resets | Reservations },
			want: []string{failLinear, failBound},
		},
		{
			name: "admits one extra under a race", alg: SlidingLog,
			bug:  func(l *lockedModels) { l.racy = true },
			opts: func(c *Checker) { c.Without = RateChanges | Refunds | Charges | Resets },
			want: []string{failLinear, failBound},
		},
		{
			name: "decides under a stale rate", alg: SlidingCounter,
			bug:  func(l *lockedModels) { l.staleRate = true },
			opts: func(c *Checker) { c.Without = Refunds | Charges | Resets },
			want: []string{failRate, failLinear},
		},
		{
			name: "decides under a stale rate", alg: TokenBucket,
			bug:  func(l *lockedModels) { l.staleRate = true },
			opts: func(c *Checker) { c.Without = Refunds | Charges | Resets | Reservations },
			want: []string{failRate, failLinear},
		},
		{
			name: "loses a reset", alg: SlidingLog,
			bug:  func(l *lockedModels) { l.ignoreReset = true },
			opts: func(c *Checker) { c.Without = RateChanges | Refunds | Charges },
			want: []string{failReset, failLinear},
		},
		{
			// A store that may lock keys out by design is held to
			// Reset only against debts older than it (laterDebt): with
			// one key, no other key's debt can excuse the denial.
			name: "loses a reset in a store that may lock keys out", alg: TokenBucket,
			bug: func(l *lockedModels) { l.ignoreReset = true },
			opts: func(c *Checker) {
				c.Without = RateChanges | Refunds | Charges | Reservations
				c.Lossy, c.Shortfall, c.Keys = true, -1, 1
			},
			want: []string{failReset},
		},
	}
	for _, tt := range tests {
		t.Run(tt.alg.String()+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			c := modelChecker(tt.alg, tt.bug)
			if tt.opts != nil {
				tt.opts(&c)
			}
			_, f := find(t, c, 10)
			if f == nil {
				t.Fatalf("the checker found nothing in 10 seeds")
			}
			for _, k := range tt.want {
				if f.kind == k {
					return
				}
			}
			t.Fatalf("found %q, want one of %q:\n%s", f.kind, tt.want, f.msg)
		})
	}
}

// The racy limiter's bug needs two calls between its look and its take:
// the deterministic scheduler finds it from a seed, and finds it again
// from the same seed.
func TestCheckDeterministicReplay(t *testing.T) {
	c := modelChecker(TokenBucket, func(l *lockedModels) { l.racy = true })
	c.Scheduler = Deterministic
	c.Without = RateChanges | Refunds | Charges | Resets | Reservations
	p, f := find(t, c, 10)
	if f == nil {
		t.Fatal("the deterministic scheduler found no race in 10 seeds")
	}
	ch, _ := c.prepare()
	for i := range 3 {
		g, _ := ch.runProgram(t, p)
		if g == nil || g.msg != f.msg {
			t.Fatalf("replay %d of seed %d: got %v, want the same failure:\n%s", i, p.Seed, g, f.msg)
		}
	}
}

// A failure is shrunk to a short program that still fails, and printed
// as a test that replays it.
func TestCheckShrinksAndPrints(t *testing.T) {
	c := modelChecker(TokenBucket, func(l *lockedModels) { l.forgetRefund = true })
	c.Without = RateChanges | Charges | Reservations | Resets
	c.Scheduler = Deterministic
	c.Source = "brokenRefunds()"
	p, f := find(t, c, 10)
	if f == nil {
		t.Fatal("found nothing")
	}
	ch, _ := c.prepare()
	small, sf := ch.shrink(t, p, f)
	if sf.kind != f.kind {
		t.Fatalf("shrunk to a failure of another kind: %q, want %q", sf.kind, f.kind)
	}
	if small.size() > 8 || small.size() >= p.size() {
		t.Errorf("shrunk %d operations to %d, want at most 8", p.size(), small.size())
	}
	if g, _ := ch.runProgram(t, small); g == nil || g.kind != f.kind {
		t.Fatalf("the shrunk program does not fail: %v", g)
	}
	repro := ch.reproTest(small, sf)
	for _, want := range []string{"func TestCheckRepro", "floodgatetest.Replay(t, brokenRefunds(), floodgatetest.Program{",
		fmt.Sprintf("Seed: %d", small.Seed), "floodgatetest.OpAllow"} {
		if !strings.Contains(repro, want) {
			t.Errorf("the repro test lacks %q:\n%s", want, repro)
		}
	}
}

// A yield point inside a critical section hangs the deterministic
// scheduler; it says so instead of hanging the test.
func TestCheckReportsDeadlock(t *testing.T) {
	defer func(d time.Duration) { deadlockAfter = d }(deadlockAfter)
	deadlockAfter = 300 * time.Millisecond
	var mu sync.Mutex
	c := Checker{
		Name: "yields under its lock", Algorithm: TokenBucket, Rate: floodgate.PerSecond(5), Scheduler: Deterministic,
		Without: RateChanges | Refunds | Charges | Resets | Reservations, Rounds: 3,
		New: func(cfg CheckConfig) (floodgate.Limiter, error) {
			tb, err := floodgate.NewTokenBucket(cfg.Rate, floodgate.WithClock(cfg.Clock.Now))
			return lockedLimiter{tb, &mu, cfg.Now}, err
		},
	}
	_, f := find(t, c, 3)
	if f == nil || f.kind != failDeadlock {
		t.Fatalf("got %v, want a deadlock report", f)
	}
}

// lockedLimiter reads a yielding clock under a lock of its own.
type lockedLimiter struct {
	floodgate.Limiter
	mu  *sync.Mutex
	now func() time.Time
}

func (l lockedLimiter) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now()
	return l.Limiter.AllowN(ctx, key, n)
}

func TestCheckRefusesInvalidCheckers(t *testing.T) {
	newTB := func(c CheckConfig) (floodgate.Limiter, error) { return floodgate.NewTokenBucket(c.Rate) }
	for _, c := range []Checker{
		{Algorithm: TokenBucket, Rate: floodgate.PerSecond(1)},
		{New: newTB, Rate: floodgate.PerSecond(1)},
		{New: newTB, Algorithm: TokenBucket},
		{New: newTB, Algorithm: Algorithm(42), Rate: floodgate.PerSecond(1)},
		{New: newTB, Algorithm: TokenBucket, Rate: floodgate.PerSecond(1), Resolution: 3 * time.Millisecond},
		{New: newTB, Algorithm: TokenBucket, Plans: []floodgate.Plan{{Rate: floodgate.PerSecond(2)}, {Rate: floodgate.PerMinute(2)}}},
	} {
		if _, err := c.normalize(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

var _ = errors.New
