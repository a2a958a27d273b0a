package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slClock is a settable clock for the window limiters' tests. A limiter
// built on it takes its epoch at construction, so set(d) puts the limiter's
// time at exactly d.
type slClock struct {
	mu    sync.Mutex
	start time.Time
	t     time.Time
}

func newSlClock() *slClock {
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	return &slClock{start: start, t: start}
}

func (c *slClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *slClock) set(d time.Duration) {
	c.mu.Lock()
	c.t = c.start.Add(d)
	c.mu.Unlock()
}

// windowLimiter is what the sliding log and the sliding counter have in
// common; the behaviours they share are tested on both.
type windowLimiter interface {
	Limiter
	Resetter
	Allow(ctx context.Context, key string) (Decision, error)
	RefundN(ctx context.Context, key string, n int) error
	Stats() Stats
	Rate() Rate
}

type windowKind struct {
	name  string
	build func(Rate, ...Option) (windowLimiter, error)
}

var windowKinds = []windowKind{
	{"SlidingLog", func(r Rate, opts ...Option) (windowLimiter, error) {
		l, err := NewSlidingLog(r, opts...)
		if err != nil {
			return nil, err
		}
		return l, nil
	}},
	{"SlidingLog/CountDenied", func(r Rate, opts ...Option) (windowLimiter, error) {
		l, err := NewSlidingLog(r, append(opts, WithCountDenied())...)
		if err != nil {
			return nil, err
		}
		return l, nil
	}},
	{"SlidingCounter", func(r Rate, opts ...Option) (windowLimiter, error) {
		sc, err := NewSlidingCounter(r, opts...)
		if err != nil {
			return nil, err
		}
		return sc, nil
	}},
}

func mustWindow(t testing.TB, k windowKind, r Rate, opts ...Option) windowLimiter {
	t.Helper()
	l, err := k.build(r, opts...)
	if err != nil {
		t.Fatalf("%s(%v): %v", k.name, r, err)
	}
	return l
}

func mustAllowN(t testing.TB, l Limiter, key string, n int) Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

// checkDecision asserts the invariants every decision keeps.
func checkDecision(t testing.TB, d Decision, limit int) {
	t.Helper()
	if d.Limit != limit || d.Remaining < 0 || d.Remaining > limit {
		t.Fatalf("decision %+v: want Limit %d and Remaining in [0, %d]", d, limit, limit)
	}
	if d.Allowed != (d.RetryAfter == 0) || d.ResetAfter < 0 {
		t.Fatalf("decision %+v: RetryAfter must be positive exactly when denied", d)
	}
}

// refLog is the naive exact sliding log the SlidingLog is checked against:
// every event time in a slice, counted by a scan.
type refLog struct {
	limit       int
	period      int64
	countDenied bool
	events      []int64 // ascending
}

// live returns the events with t > now-period, oldest first.
func (r *refLog) live(now int64) []int64 {
	i := sort.Search(len(r.events), func(i int) bool { return r.events[i] > now-r.period })
	return r.events[i:]
}

func (r *refLog) record(now int64, n int) {
	for ; n > 0; n-- {
		r.events = append(r.events, now)
	}
	if r.countDenied && len(r.events) > r.limit {
		// The log keeps only the newest Limit entries.
		r.events = append(r.events[:0], r.events[len(r.events)-r.limit:]...)
	}
}

func (r *refLog) allowN(now int64, n int) Decision {
	d := Decision{Limit: r.limit}
	if len(r.live(now))+n <= r.limit {
		d.Allowed = true
		r.record(now, n)
	} else if r.countDenied {
		r.record(now, n)
	}
	live := r.live(now)
	d.Remaining = r.limit - len(live)
	if len(live) > 0 {
		d.ResetAfter = time.Duration(live[len(live)-1] + r.period - now)
	}
	if !d.Allowed {
		d.RetryAfter = time.Duration(live[len(live)+n-r.limit-1] + r.period - now)
	}
	return d
}

// slStored returns the number of entries and the capacity of key's ring.
func slStored(t testing.TB, l *SlidingLog, key string) (n, capacity int) {
	t.Helper()
	l.store.inspect(t, key, func(st *slState, _ int64) {
		if st != nil {
			n, capacity = int(st.count), len(st.ring)
		}
	})
	return n, capacity
}

type windowStep struct {
	at   time.Duration
	n    int
	want Decision
}

func runWindowSteps(t *testing.T, l Limiter, clk *slClock, steps []windowStep) {
	t.Helper()
	for i, s := range steps {
		clk.set(s.at)
		got := mustAllowN(t, l, "k", s.n)
		if got != s.want {
			t.Errorf("t%d (at %s, n=%d):\n got %+v\nwant %+v", i, s.at, s.n, got, s.want)
		}
	}
}

func TestSlidingLogTimeline(t *testing.T) {
	const s = time.Second
	ok := func(rem int, reset time.Duration) Decision {
		return Decision{Allowed: true, Limit: 3, Remaining: rem, ResetAfter: reset}
	}
	no := func(rem int, retry, reset time.Duration) Decision {
		return Decision{Limit: 3, Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	}
	tests := []struct {
		name  string
		opts  []Option
		steps []windowStep
	}{
		{"denied not counted", nil, []windowStep{
			{0, 1, ok(2, 10*s)},          // t0
			{1 * s, 1, ok(1, 10*s)},      // t1
			{2 * s, 1, ok(0, 10*s)},      // t2
			{3 * s, 1, no(0, 7*s, 9*s)},  // t3: the event at 0 ages out at 10 s
			{10 * s, 1, ok(0, 10*s)},     // t4: exactly then
			{10 * s, 0, ok(0, 10*s)},     // t5: n == 0 reports
			{11 * s, 2, no(1, 1*s, 9*s)}, // t6: the event at 2 s must go too
			{12 * s, 2, ok(0, 10*s)},     // t7
			{25 * s, 3, ok(0, 10*s)},     // t8: all aged out, a full burst
			{34 * s, 1, no(0, 1*s, 1*s)}, // t9
			{35*s - 1, 3, no(0, 1, 1)},   // the last nanosecond
			{35 * s, 3, ok(0, 10*s)},     // and the burst ages out at once
			{36 * s, 0, ok(0, 9*s)},      // Remaining and ResetAfter tick down
			{45 * s, 0, ok(3, 0)},        // back to full
			{45*s + 500*time.Millisecond, 1, ok(2, 10*s)},
		}},
		{"denied counted", []Option{WithCountDenied()}, []windowStep{
			{0, 1, ok(2, 10*s)},                                         // t0
			{1 * s, 1, ok(1, 10*s)},                                     // t1
			{2 * s, 1, ok(0, 10*s)},                                     // t2
			{3 * s, 1, no(0, 8*s, 10*s)},                                // t3: recorded over the event at 0
			{10 * s, 1, no(0, 2*s, 10*s)},                               // t4: had t3 not counted, this would pass
			{12 * s, 1, ok(0, 10*s)},                                    // t5: the entry at 2 s aged out
			{13 * s, 3, no(0, 10*s, 10*s)},                              // t6: three attempts fill the log
			{23*s - time.Millisecond, 1, no(0, time.Millisecond, 10*s)}, // t7
			{23 * s, 1, ok(1, 10*s)},                                    // t8: t6's attempts have aged out
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newSlClock()
			l, err := NewSlidingLog(Rate{Limit: 3, Period: 10 * s}, append(tt.opts, WithClock(clk.now))...)
			if err != nil {
				t.Fatal(err)
			}
			runWindowSteps(t, l, clk, tt.steps)
		})
	}
}

// TestSlidingLogMatchesReference drives the log and the naive reference
// with the same random traffic and requires identical decisions. The period
// is 1 s, so the time unit is 1 ns and nothing is rounded; the long gaps
// empty the log (TestSlidingLogRebases covers a log that never empties).
func TestSlidingLogMatchesReference(t *testing.T) {
	for _, countDenied := range []bool{false, true} {
		for seed := int64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("countDenied=%v/seed=%d", countDenied, seed), func(t *testing.T) {
				const limit, period = 5, int64(time.Second)
				rng := rand.New(rand.NewSource(seed))
				clk := newSlClock()
				opts := []Option{WithClock(clk.now)}
				if countDenied {
					opts = append(opts, WithCountDenied())
				}
				l, err := NewSlidingLog(Rate{Limit: limit, Period: time.Second}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if l.cur.Load().unit != 1 {
					t.Fatalf("unit for a 1 s period is %d ns, want 1", l.cur.Load().unit)
				}
				ref := &refLog{limit: limit, period: period, countDenied: countDenied}
				var now int64
				for i := 0; i < 4000; i++ {
					now += randomGap(rng, period)
					n := randomCost(rng, limit)
					clk.set(time.Duration(now))
					got := mustAllowN(t, l, "k", n)
					want := ref.allowN(now, n)
					checkDecision(t, got, limit)
					if got != want {
						t.Fatalf("step %d at %d ns, n=%d:\n got %+v\nwant %+v", i, now, n, got, want)
					}
					if stored, capacity := slStored(t, l, "k"); stored > limit || capacity > limit {
						t.Fatalf("step %d: %d entries in a ring of %d, limit %d", i, stored, capacity, limit)
					}
				}
			})
		}
	}
}

// TestSlidingLogRebases keeps a log busy for far longer than 2³² units, so
// that its base must move many times, and checks it against the reference.
func TestSlidingLogRebases(t *testing.T) {
	const limit, period = 5, int64(time.Second)
	rng := rand.New(rand.NewSource(5))
	clk := newSlClock()
	l, err := NewSlidingLog(Rate{Limit: limit, Period: time.Second}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	ref := &refLog{limit: limit, period: period}
	var now int64
	for i := 0; now < 60*period; i++ {
		now += rng.Int63n(period / 4) // never quiet for a period: never emptied
		clk.set(time.Duration(now))
		n := randomCost(rng, limit)
		if got, want := mustAllowN(t, l, "k", n), ref.allowN(now, n); got != want {
			t.Fatalf("step %d at %d ns, n=%d:\n got %+v\nwant %+v", i, now, n, got, want)
		}
	}
	var base int64
	l.store.inspect(t, "k", func(st *slState, _ int64) { base = st.base() })
	if base < 50*period {
		t.Fatalf("base %d ns after 60 s of traffic: the log did not rebase", base)
	}
}

// randomGap returns a time step: mostly a small fraction of the period,
// sometimes nothing (bursts at one instant), sometimes several periods.
func randomGap(rng *rand.Rand, period int64) int64 {
	switch r := rng.Intn(20); {
	case r < 4:
		return 0
	case r == 19:
		return period + rng.Int63n(4*period)
	default:
		return rng.Int63n(period / 3)
	}
}

// randomCost returns n in [0, limit], mostly 1.
func randomCost(rng *rand.Rand, limit int) int {
	if rng.Intn(4) == 0 {
		return rng.Intn(limit + 1)
	}
	return 1
}

// TestSlidingLogNeverExceedsLimit checks exactness where the log must
// round: a period that is not a multiple of the time unit, and event times
// in arbitrary nanoseconds. At no instant may more than Limit allowed
// events lie within a Period-long window (the maximum is reached at an
// event, so checking at each allowed event suffices), even for clients
// that retry exactly after RetryAfter; and the log may be
// stricter than exact only by the rounding: a denial at t must be a denial
// for an exact log in which events count one unit longer.
func TestSlidingLogNeverExceedsLimit(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			const limit = 7
			period := int64(time.Minute + 3)
			rng := rand.New(rand.NewSource(seed))
			clk := newSlClock()
			l, err := NewSlidingLog(Rate{Limit: limit, Period: time.Duration(period)}, WithClock(clk.now))
			if err != nil {
				t.Fatal(err)
			}
			unit := l.cur.Load().unit
			if unit != 50 {
				t.Fatalf("unit for a 1 min period is %d ns, want 50", unit)
			}
			exact := &refLog{limit: limit, period: period}        // the allowed events, at their true times
			loose := &refLog{limit: limit, period: period + unit} // the same, counted a unit longer
			var now int64
			var retry time.Duration
			for i := 0; i < 4000; i++ {
				// Half the denied clients come back exactly when told to,
				// which is where rounding would show.
				if retry > 0 && rng.Intn(2) == 0 {
					now += int64(retry)
				} else {
					now += randomGap(rng, period) + rng.Int63n(unit)
				}
				n := randomCost(rng, limit)
				clk.set(time.Duration(now))
				d := mustAllowN(t, l, "k", n)
				checkDecision(t, d, limit)
				retry = d.RetryAfter
				switch inExact, inLoose := len(exact.live(now)), len(loose.live(now)); {
				case d.Allowed && inExact+n > limit:
					t.Fatalf("step %d: allowed %d with %d events in the window, limit %d", i, n, inExact, limit)
				case !d.Allowed && inLoose+n <= limit:
					t.Fatalf("step %d: denied %d with only %d events within a period and a unit", i, n, inLoose)
				}
				if d.Allowed {
					exact.record(now, n)
					loose.record(now, n)
				}
			}
		})
	}
}

// TestWindowRetryAfterIsExact replays random histories into fresh limiters
// and checks, at each denial, that the same request succeeds at
// now+RetryAfter and fails 1 ns and 1 ms earlier.
func TestWindowRetryAfterIsExact(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			r := Rate{Limit: 6, Period: 10 * time.Second}
			rng := rand.New(rand.NewSource(7))
			type call struct {
				at time.Duration
				n  int
			}
			var history []call
			replay := func(probe call) Decision {
				clk := newSlClock()
				l := mustWindow(t, k, r, WithClock(clk.now))
				for _, c := range history {
					clk.set(c.at)
					mustAllowN(t, l, "k", c.n)
				}
				clk.set(probe.at)
				return mustAllowN(t, l, "k", probe.n)
			}
			var now time.Duration
			denials := 0
			for denials < 40 {
				now += time.Duration(randomGap(rng, int64(r.Period)))
				c := call{now, randomCost(rng, r.Limit)}
				d := replay(c)
				history = append(history, c)
				if d.Allowed {
					continue
				}
				denials++
				at := now + d.RetryAfter
				if got := replay(call{at, c.n}); !got.Allowed {
					t.Fatalf("after %v: n=%d denied at +RetryAfter %s: %+v", history, c.n, d.RetryAfter, got)
				}
				for _, early := range []time.Duration{1, time.Millisecond} {
					if early >= d.RetryAfter {
						continue
					}
					if got := replay(call{at - early, c.n}); got.Allowed {
						t.Fatalf("after %v: n=%d allowed %s before RetryAfter %s", history, c.n, early, d.RetryAfter)
					}
				}
			}
		})
	}
}

// TestWindowResetAfter checks on random traffic that the key is back to its
// full quota at now+ResetAfter and not 1 ns earlier.
func TestWindowResetAfter(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			r := Rate{Limit: 4, Period: 3 * time.Second}
			rng := rand.New(rand.NewSource(3))
			clk := newSlClock()
			l := mustWindow(t, k, r, WithClock(clk.now))
			var now time.Duration
			for i := 0; i < 300; i++ {
				now += time.Duration(randomGap(rng, int64(r.Period)))
				clk.set(now)
				d := mustAllowN(t, l, "k", randomCost(rng, r.Limit))
				checkDecision(t, d, r.Limit)
				if i%10 != 0 || d.ResetAfter == 0 {
					continue
				}
				// n == 0 probes do not consume, so time may move on.
				clk.set(now + d.ResetAfter - 1)
				if got := mustAllowN(t, l, "k", 0); got.Remaining == r.Limit || got.ResetAfter != 1 {
					t.Fatalf("1 ns before ResetAfter %s: %+v", d.ResetAfter, got)
				}
				now += d.ResetAfter
				clk.set(now)
				if got := mustAllowN(t, l, "k", 0); got.Remaining != r.Limit || got.ResetAfter != 0 {
					t.Fatalf("at ResetAfter %s: %+v", d.ResetAfter, got)
				}
			}
		})
	}
}

// TestSlidingLogCountDeniedKeepsHammererBlocked: a client trying every
// second against 3 per 10 s gets through now and then when its denied
// attempts are not counted, and never again when they are; either way its
// log holds at most Limit entries.
func TestSlidingLogCountDeniedKeepsHammererBlocked(t *testing.T) {
	for _, tt := range []struct {
		countDenied bool
		wantAllowed int
	}{
		{false, 3 * 10}, // 3 at once, then 3 every 10 s for 90 s
		{true, 3},
	} {
		t.Run(fmt.Sprintf("countDenied=%v", tt.countDenied), func(t *testing.T) {
			clk := newSlClock()
			opts := []Option{WithClock(clk.now)}
			if tt.countDenied {
				opts = append(opts, WithCountDenied())
			}
			l, err := NewSlidingLog(Rate{Limit: 3, Period: 10 * time.Second}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			allowed := 0
			for sec := 0; sec < 100; sec++ {
				clk.set(time.Duration(sec) * time.Second)
				for try := 0; try < 5; try++ {
					if d := mustAllowN(t, l, "hammer", 1); d.Allowed {
						allowed++
					}
				}
				if stored, capacity := slStored(t, l, "hammer"); stored > 3 || capacity > 3 {
					t.Fatalf("at %d s: %d entries in a ring of %d", sec, stored, capacity)
				}
			}
			if allowed != tt.wantAllowed {
				t.Fatalf("allowed %d, want %d", allowed, tt.wantAllowed)
			}
			// A pause of a whole period lets it back in.
			clk.set(109 * time.Second)
			if d := mustAllowN(t, l, "hammer", 1); !d.Allowed {
				t.Fatalf("after a quiet period: %+v", d)
			}
		})
	}
}

// TestSlidingLogGrowsLazily: a key pays for one entry per decision its
// traffic needs, whatever the decision's cost, never more than Limit, and a
// log whose entries aged out reuses its ring.
func TestSlidingLogGrowsLazily(t *testing.T) {
	clk := newSlClock()
	l, err := NewSlidingLog(Rate{Limit: 100, Period: time.Minute}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at            time.Duration
		n             int
		stored, ringN int
	}{
		{0, 1, 1, 2},
		{0, 5, 1, 2}, // the same instant: merged into the newest entry
		{time.Second, 1, 2, 2},
		{2 * time.Second, 1, 3, 4},
		{3 * time.Second, 30, 4, 4},
		{4 * time.Second, 40, 5, 8},
		{5 * time.Second, 22, 6, 8},
		{time.Hour, 1, 1, 8}, // emptied, memory kept
	}
	for i, s := range steps {
		clk.set(s.at)
		if d := mustAllowN(t, l, "k", s.n); !d.Allowed {
			t.Fatalf("step %d: denied %+v", i, d)
		}
		if stored, capacity := slStored(t, l, "k"); stored != s.stored || capacity != s.ringN {
			t.Errorf("step %d: %d entries in a ring of %d, want %d in %d", i, stored, capacity, s.stored, s.ringN)
		}
	}
}

// TestSlidingLogLargeCostIsO1: a cost of half the largest limit is one
// entry of 8 bytes, not 2¹⁵ of them; a log full of single-unit entries
// holds at most Limit, and a large denied cost with WithCountDenied keeps
// that bound.
func TestSlidingLogLargeCostIsO1(t *testing.T) {
	for _, countDenied := range []bool{false, true} {
		t.Run(fmt.Sprintf("countDenied=%v", countDenied), func(t *testing.T) {
			clk := newSlClock()
			opts := []Option{WithClock(clk.now)}
			if countDenied {
				opts = append(opts, WithCountDenied())
			}
			l, err := NewSlidingLog(Rate{Limit: MaxSlidingLogLimit, Period: time.Hour}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			d := mustAllowN(t, l, "k", 1<<15)
			if !d.Allowed || d.Remaining != 1<<15 {
				t.Fatalf("first half: %+v", d)
			}
			if stored, capacity := slStored(t, l, "k"); stored != 1 || capacity > 2 {
				t.Fatalf("after AllowN(1<<15): %d entries in a ring of %d, want 1 in at most 2", stored, capacity)
			}
			clk.set(time.Millisecond)
			if d := mustAllowN(t, l, "k", 1<<15); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("second half: %+v", d)
			}
			clk.set(2 * time.Millisecond)
			d = mustAllowN(t, l, "k", 1<<15)
			// Until the first half ages out; counted, the attempt displaces
			// the first half and must wait for the second.
			want := time.Hour - 2*time.Millisecond
			if countDenied {
				want = time.Hour - time.Millisecond
			}
			if d.Allowed || d.RetryAfter != want {
				t.Fatalf("third half: %+v, want denied for %s", d, want)
			}
			if stored, capacity := slStored(t, l, "k"); stored > 2 || capacity > 2 {
				t.Fatalf("after a denied AllowN(1<<15): %d entries in a ring of %d, want at most 2", stored, capacity)
			}
		})
	}
}

// TestSlidingLogRefundN refunds on a ring that has wrapped, so that the
// newest entries are not at its end, and checks against the reference.
func TestSlidingLogRefundN(t *testing.T) {
	const limit, period = 5, int64(time.Second)
	rng := rand.New(rand.NewSource(11))
	clk := newSlClock()
	l, err := NewSlidingLog(Rate{Limit: limit, Period: time.Second}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	ref := &refLog{limit: limit, period: period}
	ctx := context.Background()
	var now int64
	refunds := 0
	for i := 0; i < 2000; i++ {
		now += randomGap(rng, period)
		clk.set(time.Duration(now))
		n := randomCost(rng, limit)
		got, want := mustAllowN(t, l, "k", n), ref.allowN(now, n)
		if got != want {
			t.Fatalf("step %d: got %+v, want %+v", i, got, want)
		}
		if got.Allowed && n > 0 && rng.Intn(3) == 0 {
			m := 1 + rng.Intn(n)
			if err := l.RefundN(ctx, "k", m); err != nil {
				t.Fatal(err)
			}
			ref.events = ref.events[:len(ref.events)-m]
			refunds++
		}
	}
	if refunds < 100 {
		t.Fatalf("only %d refunds exercised", refunds)
	}
}

// TestSlidingLogRefundNWithEventInBetween documents the approximation: the
// refund removes the newest entries, whoever recorded them.
func TestSlidingLogRefundNWithEventInBetween(t *testing.T) {
	ctx := context.Background()
	clk := newSlClock()
	l, err := NewSlidingLog(Rate{Limit: 2, Period: 10 * time.Second}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	mustAllowN(t, l, "k", 1) // at 0: to be refunded
	clk.set(time.Second)
	mustAllowN(t, l, "k", 1) // at 1 s: another caller's event
	if err := l.RefundN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	// Exact would keep the event at 1 s (reset at 11 s); the log kept the
	// one at 0 and forgets it a second early.
	if d := mustAllowN(t, l, "k", 0); d.Remaining != 1 || d.ResetAfter != 9*time.Second {
		t.Fatalf("after the refund: %+v", d)
	}
}

func TestSlidingLogUnit(t *testing.T) {
	for _, tt := range []struct {
		period time.Duration
		unit   int64
	}{
		{1, 1},
		{time.Second, 1},
		{1 << 31, 1}, // 2³² ns is exactly two periods
		{1<<31 + 1, 2},
		{3 << 31, 5},
		{time.Minute, 50},
		{10 * time.Minute, 500},
		{time.Hour, 2000},
		{1 << 31 * time.Millisecond, 1_000_000}, // 24.9 days: the last that keeps whole milliseconds
		{1<<31*time.Millisecond + 1, 2_000_000},
		{maxWindowPeriod, 2_000_000_000},
	} {
		if got := logUnit(int64(tt.period)); got != tt.unit {
			t.Errorf("period %s: unit %d ns, want %d", tt.period, got, tt.unit)
		}
	}
}

func TestWindowOptionValidation(t *testing.T) {
	tests := []struct {
		name    string
		rate    Rate
		opts    []Option
		wantErr error
		kinds   string // "" for all, else the kinds (by name prefix) the case applies to
	}{
		{"zero limit", Rate{0, time.Second}, nil, ErrInvalidRate, ""},
		{"negative limit", Rate{-1, time.Second}, nil, ErrInvalidRate, ""},
		{"limit too large", Rate{maxLimit + 1, time.Second}, nil, ErrInvalidRate, ""},
		{"zero period", Rate{1, 0}, nil, ErrInvalidRate, ""},
		{"negative period", Rate{1, -time.Second}, nil, ErrInvalidRate, ""},
		{"period too long", Rate{1, maxWindowPeriod + 1}, nil, ErrInvalidRate, ""},
		{"burst", Rate{5, time.Second}, []Option{WithBurst(2)}, ErrInvalidOption, ""},
		{"interval refill", Rate{5, time.Second}, []Option{WithIntervalRefill()}, ErrInvalidOption, ""},
		{"nil option", Rate{5, time.Second}, []Option{nil}, ErrInvalidOption, ""},
		{"nil clock", Rate{5, time.Second}, []Option{WithClock(nil)}, ErrInvalidOption, ""},
		{"zero keys", Rate{5, time.Second}, []Option{WithMaxKeys(0)}, ErrInvalidOption, ""},
		{"shards not a power of two", Rate{5, time.Second}, []Option{WithShards(3)}, ErrInvalidOption, ""},
		{"more shards than keys", Rate{5, time.Second}, []Option{WithMaxKeys(2), WithShards(4)}, ErrInvalidOption, ""},
		{"count denied on a counter", Rate{5, time.Second}, []Option{WithCountDenied()}, ErrInvalidOption, "SlidingCounter"},
		{"largest limit and period", Rate{maxLimit, maxWindowPeriod}, nil, nil, "SlidingCounter"},
		{"largest log limit and period", Rate{MaxSlidingLogLimit, maxWindowPeriod}, nil, nil, "SlidingLog"},
		{"log limit too large", Rate{MaxSlidingLogLimit + 1, time.Second}, nil, ErrInvalidRate, "SlidingLog"},
	}
	for _, tt := range tests {
		for _, k := range windowKinds {
			if !strings.HasPrefix(k.name, tt.kinds) {
				continue
			}
			t.Run(k.name+"/"+tt.name, func(t *testing.T) {
				l, err := k.build(tt.rate, tt.opts...)
				if !errors.Is(err, tt.wantErr) || (err == nil) != (l != nil) {
					t.Fatalf("got (%v, %v), want error %v", l, err, tt.wantErr)
				}
			})
		}
	}
	if _, err := NewTokenBucket(PerSecond(5), WithCountDenied()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("token bucket with WithCountDenied: %v, want ErrInvalidOption", err)
	}
}

func TestWindowCost(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newSlClock()
			l := mustWindow(t, k, Rate{Limit: 3, Period: time.Minute}, WithClock(clk.now))
			for _, tt := range []struct {
				n       int
				wantErr error
			}{{4, ErrCostExceedsLimit}, {-1, ErrInvalidCost}} {
				d, err := l.AllowN(ctx, "k", tt.n)
				if !errors.Is(err, tt.wantErr) || d != (Decision{Limit: 3}) {
					t.Errorf("AllowN(%d) = %+v, %v; want %v", tt.n, d, err, tt.wantErr)
				}
				if err := l.RefundN(ctx, "k", tt.n); !errors.Is(err, tt.wantErr) {
					t.Errorf("RefundN(%d) = %v; want %v", tt.n, err, tt.wantErr)
				}
			}
			if _, err := l.AllowN(ctx, string(make([]byte, DefaultMaxKeyLength+1)), 1); !errors.Is(err, ErrKeyTooLong) {
				t.Errorf("long key: %v, want ErrKeyTooLong", err)
			}
			// n == 0 on an untracked key reports a full quota and tracks nothing.
			if d := mustAllowN(t, l, "k", 0); d != (Decision{Allowed: true, Limit: 3, Remaining: 3}) {
				t.Errorf("n == 0 on a fresh key: %+v", d)
			}
			if keys := l.Stats().Keys; keys != 0 {
				t.Errorf("n == 0 left %d keys tracked", keys)
			}
			// n == 0 on a tracked key consumes nothing.
			mustAllowN(t, l, "k", 2)
			for i := 0; i < 3; i++ {
				if d := mustAllowN(t, l, "k", 0); !d.Allowed || d.Remaining != 1 {
					t.Errorf("n == 0 after 2 of 3: %+v", d)
				}
			}
			if d := mustAllowN(t, l, "k", 1); !d.Allowed || d.Remaining != 0 {
				t.Errorf("the last unit: %+v", d)
			}
		})
	}
}

func TestWindowResetAndIndependentKeys(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newSlClock()
			l := mustWindow(t, k, Rate{Limit: 2, Period: time.Minute}, WithClock(clk.now))
			for _, key := range []string{"a", "b"} {
				for i, want := range []bool{true, true, false} {
					if d := mustAllowN(t, l, key, 1); d.Allowed != want {
						t.Fatalf("key %s, call %d: %+v", key, i, d)
					}
				}
			}
			if err := l.Reset(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if d := mustAllowN(t, l, "a", 2); !d.Allowed {
				t.Errorf("after Reset: %+v", d)
			}
			if d := mustAllowN(t, l, "b", 1); d.Allowed {
				t.Errorf("Reset of a released b: %+v", d)
			}
			if err := l.Reset(ctx, "never seen"); err != nil {
				t.Errorf("Reset of an untracked key: %v", err)
			}
			if err := l.RefundN(ctx, "never seen", 1); err != nil || l.Stats().Keys != 2 {
				t.Errorf("RefundN of an untracked key: %v, %d keys", err, l.Stats().Keys)
			}
			if err := l.RefundN(ctx, "b", 1); err != nil {
				t.Fatal(err)
			}
			if d := mustAllowN(t, l, "b", 1); !d.Allowed || d.Remaining != 0 {
				t.Errorf("after RefundN: %+v", d)
			}
		})
	}
}

// TestWindowConcurrentExactness: many goroutines on one key at a frozen
// clock get exactly the quota between them.
func TestWindowConcurrentExactness(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			const limit, workers, tries = 100, 32, 20
			clk := newSlClock()
			l := mustWindow(t, k, Rate{Limit: limit, Period: time.Minute}, WithClock(clk.now))
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < tries; i++ {
						d, err := l.AllowN(context.Background(), "shared", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := allowed.Load(); got != limit {
				t.Fatalf("allowed %d of %d, want exactly %d", got, workers*tries, limit)
			}
		})
	}
}

// TestWindowEvictionIsLossless: keys whose window has emptied are dropped
// first and count as idle evictions; a key dropped while it still held
// events counts as a live one.
func TestWindowEvictionIsLossless(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			clk := newSlClock()
			l := mustWindow(t, k, Rate{Limit: 3, Period: time.Minute}, WithClock(clk.now), WithMaxKeys(4), WithShards(1))
			var reset time.Duration
			for i := 0; i < 4; i++ {
				d := mustAllowN(t, l, "old"+strconv.Itoa(i), 3)
				reset = max(reset, d.ResetAfter)
			}
			clk.set(reset - 1)
			mustAllowN(t, l, "new0", 1) // every old key still holds an event
			if st := l.Stats(); st.EvictedLive != 1 || st.EvictedIdle != 0 || st.Keys != 4 {
				t.Fatalf("before the old keys emptied: %+v", st)
			}
			clk.set(reset)
			for i := 1; i < 4; i++ {
				mustAllowN(t, l, "new"+strconv.Itoa(i), 1)
			}
			if st := l.Stats(); st.EvictedLive != 1 || st.EvictedIdle != 3 || st.Keys != 4 {
				t.Fatalf("after: %+v", st)
			}
			// Nothing was lost: the idle keys that were dropped have their
			// full quota, as they would have had they been kept.
			for i := 0; i < 4; i++ {
				if d := mustAllowN(t, l, "old"+strconv.Itoa(i), 0); d.Remaining != 3 {
					t.Errorf("old%d: %+v", i, d)
				}
			}
		})
	}
}

// ExampleNewSlidingLog limits sign-ups per nickname pattern: abc1, abc2,
// abc999 all share the key "abc{NUM}", 5 per minute. The clock is injected
// only to make the output reproducible.
func ExampleNewSlidingLog() {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	signups, err := NewSlidingLog(Rate{Limit: 5, Period: time.Minute},
		WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 6; i++ {
		d, err := signups.Allow(context.Background(), "abc{NUM}")
		if err != nil {
			panic(err)
		}
		fmt.Printf("sign-up %d: allowed=%v remaining=%d retry after %s\n", i, d.Allowed, d.Remaining, d.RetryAfter)
		now = now.Add(10 * time.Second)
	}
	// Output:
	// sign-up 1: allowed=true remaining=4 retry after 0s
	// sign-up 2: allowed=true remaining=3 retry after 0s
	// sign-up 3: allowed=true remaining=2 retry after 0s
	// sign-up 4: allowed=true remaining=1 retry after 0s
	// sign-up 5: allowed=true remaining=0 retry after 0s
	// sign-up 6: allowed=false remaining=0 retry after 10s
}

// TestWindowLimitersInAComposite combines a sliding log and a sliding
// counter on one key, all or nothing: a request one of them denies takes
// nothing from the other.
func TestWindowLimitersInAComposite(t *testing.T) {
	clk := newSlClock()
	perTen, err := NewSlidingLog(Rate{Limit: 3, Period: 10 * time.Second}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	perMinute, err := NewSlidingCounter(Rate{Limit: 4, Period: time.Minute}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	both, err := All(perTen, perMinute)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at                   time.Duration
		allowed              bool
		logLeft, counterLeft int
	}{
		{0, true, 2, 3},
		{0, true, 1, 2},
		{0, true, 0, 1},
		{0, false, 0, 1}, // the log denies: the counter keeps its unit
		{10 * time.Second, true, 2, 0},
		{10 * time.Second, false, 2, 0}, // the counter denies: the log keeps its units
	}
	for i, s := range steps {
		clk.set(s.at)
		if d := mustAllowN(t, both, "k", 1); d.Allowed != s.allowed {
			t.Fatalf("step %d: %+v, want allowed=%v", i, d, s.allowed)
		}
		logLeft, counterLeft := mustAllowN(t, perTen, "k", 0).Remaining, mustAllowN(t, perMinute, "k", 0).Remaining
		if logLeft != s.logLeft || counterLeft != s.counterLeft {
			t.Errorf("step %d: %d left in the log, %d in the counter; want %d and %d", i, logLeft, counterLeft, s.logLeft, s.counterLeft)
		}
	}
}
