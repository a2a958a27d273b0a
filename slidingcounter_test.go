package floodgate

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

func TestSlidingCounterTimeline(t *testing.T) {
	const s = time.Second
	ok := func(rem int, reset time.Duration) Decision {
		return Decision{Allowed: true, Limit: 10, Remaining: rem, ResetAfter: reset}
	}
	no := func(rem int, retry, reset time.Duration) Decision {
		return Decision{Limit: 10, Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	}
	// Fixed windows of 10 s: [0, 10 s), [10 s, 20 s), ...
	steps := []windowStep{
		{0, 4, ok(6, 20*s)},            // t0
		{5 * s, 6, ok(0, 15*s)},        // t1: the window is full
		{9 * s, 1, no(0, 2*s, 11*s)},   // t2: at 11 s, 10·9/10 + 1 = 10
		{10 * s, 1, no(0, 1*s, 10*s)},  // t3: estimate 10·10/10 + 0
		{11 * s, 1, ok(0, 19*s)},       // t4: estimate 9, plus this one
		{15 * s, 0, ok(4, 15*s)},       // t5: 10·5/10 + 1 = 6
		{15 * s, 5, no(4, 1*s, 15*s)},  // t6: at 16 s, 10·4/10 + 1 + 5 = 10
		{16 * s, 5, ok(0, 14*s)},       // t7
		{25 * s, 0, ok(7, 5*s)},        // t8: 6·5/10 + 0 = 3
		{40 * s, 10, ok(0, 20*s)},      // t9: both windows have passed
		{45 * s, 1, no(0, 6*s, 15*s)},  // next window, at 1 s: 10·9/10 + 1
		{50*s + 1, 0, ok(0, 10*s-1)},   // 10·(10 s − 1 ns)/10 s rounds up to 10
		{51*s - 1, 1, no(0, 1, 9*s+1)}, // one nanosecond short
		{51 * s, 1, ok(0, 19*s)},
	}
	clk := newSlClock()
	sc, err := NewSlidingCounter(Rate{Limit: 10, Period: 10 * s}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	runWindowSteps(t, sc, clk, steps)
}

// scEstimate returns the counter's estimate for key at now, times Period
// (an integer), and the previous window's count and elapsed time it used.
func scEstimate(t testing.TB, sc *SlidingCounter, key string) (estimateP, prev, elapsed int64) {
	t.Helper()
	sc.store.inspect(t, key, func(st *scState, now int64) {
		elapsed = now % sc.cur.Load().period
		if st != nil {
			p, c := st.counts(now / sc.cur.Load().period)
			estimateP, prev = int64(p)*(sc.cur.Load().period-elapsed)+int64(c)*sc.cur.Load().period, int64(p)
		}
	})
	return estimateP, prev, elapsed
}

// TestSlidingCounterErrorBound drives a counter with random traffic and
// measures, with an exact SlidingLog of twice the limit recording the
// events the counter let through, how far the estimate strays from the
// exact count X of events in the window: at every step it must satisfy
// the documented −p·e/P ≤ estimate − X ≤ p·(P−e)/P, and X may exceed the
// limit by at most p·e/P. The deviations seen are logged.
func TestSlidingCounterErrorBound(t *testing.T) {
	const limit = 20
	period := int64(time.Second) // a 1 ns unit: the log counts exactly
	shapes := []struct {
		name string
		gap  func(*rand.Rand) int64
	}{
		// Poisson arrivals at 1.5 times the limit.
		{"steady", func(rng *rand.Rand) int64 { return int64(rng.ExpFloat64() * float64(period) / (1.5 * limit)) }},
		// Bursts, pauses and quiet spells.
		{"bursty", func(rng *rand.Rand) int64 { return randomGap(rng, period) / 4 }},
	}
	for _, shape := range shapes {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", shape.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				clk := newSlClock()
				sc, err := NewSlidingCounter(Rate{Limit: limit, Period: time.Second}, WithClock(clk.now))
				if err != nil {
					t.Fatal(err)
				}
				exact, err := NewSlidingLog(Rate{Limit: 2 * limit, Period: time.Second}, WithClock(clk.now))
				if err != nil {
					t.Fatal(err)
				}
				var now int64
				var over, under int64        // largest estimate error either way, ×P
				overLimit, wrongDeny := 0, 0 // events past the limit; denials exact would allow
				for i := 0; i < 5000; i++ {
					now += shape.gap(rng)
					clk.set(time.Duration(now))
					n := randomCost(rng, 3)
					x := 2*limit - mustAllowN(t, exact, "k", 0).Remaining
					d := mustAllowN(t, sc, "k", n)
					checkDecision(t, d, limit)
					if !d.Allowed && x+n <= limit {
						wrongDeny++
					}
					if d.Allowed && n > 0 {
						if e := mustAllowN(t, exact, "k", n); !e.Allowed {
							t.Fatalf("step %d: more than %d events in a period", i, 2*limit)
						}
						x += n
					}
					est, p, e := scEstimate(t, sc, "k")
					dev := est - int64(x)*period // (estimate − X)·P
					if dev < -p*e || dev > p*(period-e) {
						t.Fatalf("step %d: (estimate − exact)·P = %d outside [−%d, %d]", i, dev, p*e, p*(period-e))
					}
					if int64(x-limit)*period > p*e {
						t.Fatalf("step %d: %d events in the window, limit %d, bound %d + %d·%d/%d", i, x, limit, limit, p, e, period)
					}
					over, under = max(over, dev), max(under, -dev)
					overLimit = max(overLimit, x-limit)
				}
				t.Logf("estimate above exact by up to %.2f events, below by up to %.2f; "+
					"at most %d events over the limit of %d; %d denials an exact log would have allowed",
					float64(over)/float64(period), float64(under)/float64(period), overLimit, limit, wrongDeny)
			})
		}
	}
}

// TestSlidingCounterWorstCase builds the case the bound describes: the
// previous window's events all at its very end, then a client trying every
// millisecond. The counter lets through nearly twice the limit within one
// period, which is the price of its constant memory.
func TestSlidingCounterWorstCase(t *testing.T) {
	const limit = 10
	period := time.Second
	clk := newSlClock()
	sc, err := NewSlidingCounter(Rate{Limit: limit, Period: period}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	exact, err := NewSlidingLog(Rate{Limit: 2 * limit, Period: period}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	clk.set(2*period - 1) // the last nanosecond of window 1
	for _, l := range []Limiter{sc, exact} {
		if d := mustAllowN(t, l, "k", limit); !d.Allowed {
			t.Fatalf("the burst: %+v", d)
		}
	}
	peak := 0
	for at := 2 * period; at < 3*period-time.Millisecond; at += time.Millisecond {
		clk.set(at)
		if d := mustAllowN(t, sc, "k", 1); d.Allowed {
			if e := mustAllowN(t, exact, "k", 1); !e.Allowed {
				t.Fatalf("at %s: more than %d events in a period", at, 2*limit)
			}
		}
		peak = max(peak, 2*limit-mustAllowN(t, exact, "k", 0).Remaining)
	}
	if peak != 2*limit-1 {
		t.Fatalf("peak %d events in a period, want %d: the bound is nearly reached, never passed", peak, 2*limit-1)
	}
}

// TestSlidingCounterRefundN takes refunds from the current window first,
// then from the previous one.
func TestSlidingCounterRefundN(t *testing.T) {
	ctx := context.Background()
	clk := newSlClock()
	sc, err := NewSlidingCounter(Rate{Limit: 10, Period: 10 * time.Second}, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	mustAllowN(t, sc, "k", 4)
	clk.set(15 * time.Second) // the 4 are now the previous window's, at half weight
	mustAllowN(t, sc, "k", 2)
	steps := []struct {
		refund        int
		remaining     int
		estimateTimes int64 // estimate × Period, in events × 10 s
	}{
		{1, 10 - 1 - 2, 4*5 + 1*10}, // from the current window
		{2, 10 - 0 - 2, 3*5 + 0*10}, // one from each
		{9, 10, 0},                  // more than there is
	}
	for i, s := range steps {
		if err := sc.RefundN(ctx, "k", s.refund); err != nil {
			t.Fatal(err)
		}
		if d := mustAllowN(t, sc, "k", 0); d.Remaining != s.remaining {
			t.Errorf("step %d: %+v, want Remaining %d", i, d, s.remaining)
		}
		if est, _, _ := scEstimate(t, sc, "k"); est != s.estimateTimes*int64(time.Second) {
			t.Errorf("step %d: estimate·P = %d, want %d s", i, est, s.estimateTimes)
		}
	}
}

// ExampleNewSlidingCounter guards a reward endpoint with 10,000 claims an
// hour per client, in constant memory per client. The clock is injected only to
// make the output reproducible.
func ExampleNewSlidingCounter() {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rewards, err := NewSlidingCounter(PerHour(10000),
		WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := rewards.AllowN(ctx, "client-42", 10000)
	fmt.Println("a full hour's worth at once:", d.Allowed, d.Remaining)
	d, _ = rewards.Allow(ctx, "client-42")
	fmt.Println("one more:", d.Allowed, "retry after", d.RetryAfter)

	// Halfway through the next hour, half of the previous hour's count
	// still weighs on the estimate.
	now = now.Add(90 * time.Minute)
	d, _ = rewards.Allow(ctx, "client-42")
	fmt.Println("90 minutes later:", d.Allowed, d.Remaining)
	// Output:
	// a full hour's worth at once: true 0
	// one more: false retry after 1h0m0.36s
	// 90 minutes later: true 4999
}
