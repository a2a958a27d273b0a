package floodgate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The admission kinds on a key restored from the debt memory: a key in
// debt beyond its limit (ChargeN, for WithCostAfter) or booked ahead
// (ReserveN, for WithWait) is evicted by a spray within the stated size
// and comes back owing what it owed.

// kindStep is one call at a time after the start: a charge (charge > 0),
// or AllowN(n).
type kindStep struct {
	at     time.Duration
	charge int
	n      int
}

// TestRestoreAfterCharge: a key charged beyond its limit and evicted
// comes back deciding as it would have — field by field while its counts
// fit the debt memory's exact range (2^25 events a window for a counter,
// up to Rate.Limit units for a log), and never allowing what it would
// have denied beyond. A counter charged 2^26 events, or a log charged
// beyond its limit, used to lose its debt altogether: the amount spilled
// out of the entry's 26 bits into the key's fingerprint, so the key came
// back fresh.
func TestRestoreAfterCharge(t *testing.T) {
	log, counter := restoreKinds(floodgate.PerMinute(5), 5)[5], restoreKinds(floodgate.PerMinute(10), 10)[4]
	logCD := restoreKinds(floodgate.PerMinute(5), 5)[6]
	const big = 1 << 24
	cases := []struct {
		name  string
		kind  restoreKind
		exact bool // decisions equal (see late), else no forgiveness
		// late is how much later than exact a restored log's older
		// entry may age out (a grid step: see SlidingLog).
		late  time.Duration
		spent []kindStep
		asks  []kindStep
	}{
		{"SlidingCounter/charged 2^26", counter, false, 0,
			[]kindStep{{at: time.Second, n: 5}, {at: 61 * time.Second, charge: big}, {at: 61 * time.Second, charge: big},
				{at: 61 * time.Second, charge: big}, {at: 61 * time.Second, charge: big}},
			[]kindStep{{at: 62 * time.Second, n: 1}, {at: 100 * time.Second, n: 0}, {at: 179 * time.Second, n: 1},
				{at: 179*time.Second + 999*time.Millisecond, n: 1}, {at: 180 * time.Second, n: 10}}},
		{"SlidingCounter/charged 3·2^24 over two windows", counter, false, 0,
			[]kindStep{{at: time.Second, charge: big}, {at: 61 * time.Second, charge: big}, {at: 61 * time.Second, charge: big}},
			[]kindStep{{at: 62 * time.Second, n: 1}, {at: 150 * time.Second, n: 1}, {at: 179*time.Second + 999*time.Millisecond, n: 0},
				{at: 180 * time.Second, n: 10}}},
		{"SlidingCounter/charged 20 of 10", counter, true, 0,
			[]kindStep{{at: time.Second, n: 9}, {at: 61 * time.Second, charge: 20}},
			[]kindStep{{at: 62 * time.Second, n: 1}, {at: 90 * time.Second, n: 0}, {at: 121 * time.Second, n: 1},
				{at: 150 * time.Second, n: 4}, {at: 170 * time.Second, n: 1}, {at: 181 * time.Second, n: 10}}},
		{"SlidingLog/charged 24 of 5", log, false, 0,
			[]kindStep{{at: 0, n: 4}, {at: time.Second, charge: 5}, {at: 2 * time.Second, charge: 5},
				{at: 3 * time.Second, charge: 5}, {at: 4 * time.Second, charge: 5}},
			[]kindStep{{at: 5 * time.Second, n: 1}, {at: 30 * time.Second, n: 0}, {at: 61 * time.Second, n: 1},
				{at: 63*time.Second + 500*time.Millisecond, n: 1}, {at: 64 * time.Second, n: 5}}},
		{"SlidingLog/CountDenied/charged 24 of 5", logCD, false, 0,
			[]kindStep{{at: 0, n: 4}, {at: time.Second, charge: 5}, {at: 2 * time.Second, charge: 5},
				{at: 3 * time.Second, charge: 5}, {at: 4 * time.Second, charge: 5}},
			[]kindStep{{at: 5 * time.Second, n: 1}, {at: 30 * time.Second, n: 2}, {at: 61 * time.Second, n: 1},
				{at: 89 * time.Second, n: 1}, {at: 91 * time.Second, n: 5}}},
		{"SlidingLog/charged to its limit", log, true, 60 * time.Microsecond,
			[]kindStep{{at: 0, n: 2}, {at: 30 * time.Second, charge: 3}},
			[]kindStep{{at: 31 * time.Second, n: 1}, {at: 61 * time.Second, n: 2}, {at: 62 * time.Second, n: 1},
				{at: 89 * time.Second, n: 0}, {at: 91 * time.Second, n: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bounded, exact, clk, start := restorePair(t, tc.kind)
			for _, s := range tc.spent {
				clk.t = start.Add(s.at)
				for _, l := range []keyedLimiter{bounded, exact} {
					spend(t, l, s)
				}
			}
			evictIdle(t, bounded, 8, tc.kind.capacity)
			restored := bounded.Stats().Restored
			for i, s := range tc.asks {
				clk.t = start.Add(s.at)
				got, err := bounded.AllowN(context.Background(), "alice", s.n)
				mustNot(t, err)
				want, err := exact.AllowN(context.Background(), "alice", s.n)
				mustNot(t, err)
				switch {
				case got.Allowed && !want.Allowed, got.Remaining > want.Remaining, got.RetryAfter < want.RetryAfter && !got.Allowed:
					t.Errorf("at %v, AllowN(%d): restored %+v forgives, never evicted %+v", s.at, s.n, got, want)
				case tc.exact && !sameDecision(got, want, tc.late):
					t.Errorf("at %v, AllowN(%d): restored %+v, never evicted %+v", s.at, s.n, got, want)
				}
				if i == 0 && bounded.Stats().Restored != restored+1 {
					t.Fatalf("alice was not restored from her debt: %+v", bounded.Stats())
				}
			}
		})
	}
}

// TestRestoreAfterReserve: a token bucket that booked tokens ahead
// (ReserveN) and was evicted before its turn comes back with the booking
// still owed: the same reservations and decisions, field by field, as a
// bucket never evicted.
func TestRestoreAfterReserve(t *testing.T) {
	for _, k := range restoreKinds(floodgate.Rate{Limit: 3, Period: 10 * time.Second}, 7)[:4] {
		t.Run(k.name, func(t *testing.T) {
			bounded, exact, clk, start := restorePair(t, k)
			ctx := context.Background()
			reserve := func(at time.Duration, n int) {
				clk.t = start.Add(at)
				got, err := bounded.(floodgate.Reserver).ReserveN(ctx, "alice", n, time.Minute)
				mustNot(t, err)
				want, err := exact.(floodgate.Reserver).ReserveN(ctx, "alice", n, time.Minute)
				mustNot(t, err)
				if got != want {
					t.Fatalf("at %v, ReserveN(%d): restored %+v, never evicted %+v", at, n, got, want)
				}
			}
			reserve(0, k.capacity)
			reserve(time.Second, 3) // booked ahead
			if clk.t = start.Add(time.Second); true {
				evictIdle(t, bounded, 8, k.capacity)
			}
			restored := bounded.Stats().Restored
			reserve(2*time.Second, 2) // behind the booking
			if bounded.Stats().Restored != restored+1 {
				t.Fatalf("alice was not restored from her debt: %+v", bounded.Stats())
			}
			for _, at := range []time.Duration{5 * time.Second, 12 * time.Second, 20 * time.Second, 40 * time.Second} {
				clk.t = start.Add(at)
				got, err := bounded.AllowN(ctx, "alice", 1)
				mustNot(t, err)
				want, err := exact.AllowN(ctx, "alice", 1)
				mustNot(t, err)
				if got != want {
					t.Errorf("at %v, AllowN(1): restored %+v, never evicted %+v", at, got, want)
				}
			}
		})
	}
}

// restorePair builds k twice on one clock: bounded, a store of 8 keys in
// one shard, and exact, a store that never evicts.
func restorePair(t *testing.T, k restoreKind) (bounded, exact keyedLimiter, clk *replayClock, start time.Time) {
	t.Helper()
	start = time.Unix(1_700_000_000, 0)
	clk = &replayClock{t: start}
	opts := append([]floodgate.Option{floodgate.WithClock(clk.now)}, k.opts...)
	bounded, err := k.build(k.rate, append(opts, floodgate.WithMaxKeys(8), floodgate.WithShards(1))...)
	mustNot(t, err)
	exact, err = k.build(k.rate, opts...)
	mustNot(t, err)
	return bounded, exact, clk, start
}

// spend makes alice's call s on l, which must be allowed if an AllowN.
func spend(t *testing.T, l keyedLimiter, s kindStep) {
	t.Helper()
	if s.charge > 0 {
		mustCharge(t, l.(floodgate.Charger).ChargeN(context.Background(), "alice", s.charge))
		return
	}
	if d, err := l.AllowN(context.Background(), "alice", s.n); err != nil || !d.Allowed {
		t.Fatal(fmt.Sprintf("spending %d at %v: %+v, %v", s.n, s.at, d, err))
	}
}

// sameDecision reports whether got decides as want: field by field, but
// that its waits may be up to late longer.
func sameDecision(got, want floodgate.Decision, late time.Duration) bool {
	in := func(g, w time.Duration) bool { return g >= w && g-w <= late }
	return got.Allowed == want.Allowed && got.Remaining == want.Remaining && got.Limit == want.Limit &&
		in(got.RetryAfter, want.RetryAfter) && in(got.ResetAfter, want.ResetAfter)
}
