package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestSlidingLogConversionMatchesMemory: a log raised under ScaleUsed
// while it counts more than its old limit converts on Redis as in
// memory, on a fake clock, with both clients. Its newest entry gains what
// any count from its units to the log's would (inherit.Strategy.Gain),
// taken back from the oldest: the order of logs a bounded store needs
// (see floodgate.SlidingLog.SetRate), which memory and Redis must share
// so that they decide alike.
//
//   - over: 3 units at 0 s and 2 at 0.3 s of 5/s, lowered to 2/s keeping
//     them (a decision at 0.4 s converts it on Redis too, which
//     otherwise converts once for both changes), raised to 10/s at 0.5 s: 10 units, all at 0.3 s (the newest
//     gained 8, as a log of 2 would, and the oldest gave back 3), so no
//     room until 1.3 s, where the old conversion left 3 at 1.05 s.
//   - debt: charged 4 at 0 s under 2/s (2 at 0 s, 2 owed for 1 s), raised
//     to 10/s at 0.5 s: its 2 real units fold into one entry at the
//     change, the debt's anchor (see floodgate.SlidingLog.SetRate), and
//     the debt gains 8, as its last window of 2 would: 10 owed for 1.5 s,
//     no room until 2.5 s.
func TestSlidingLogConversionMatchesMemory(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	type probe struct {
		at   time.Duration
		want int
	}
	cases := []struct {
		name   string
		rate   floodgate.Rate
		setup  func(t *testing.T, l floodgate.Limiter, clock *fakeClock)
		probes []probe
	}{
		{"over", floodgate.Rate{Limit: 5, Period: time.Second}, func(t *testing.T, l floodgate.Limiter, clock *fakeClock) {
			mustAllowed(t, l, "k", 3, true)
			clock.t = t0.Add(300 * time.Millisecond)
			mustAllowed(t, l, "k", 2, true)
			clock.t = t0.Add(400 * time.Millisecond)
			mustNot(t, l.(floodgate.RateSetter).SetRate(ctx, floodgate.RateChange{Rate: floodgate.Rate{Limit: 2, Period: time.Second}}))
			mustAllowed(t, l, "k", 0, true) // Redis converts a key at its next decision: now, not once for both changes
		}, []probe{{500 * time.Millisecond, 0}, {1050 * time.Millisecond, 0}, {1350 * time.Millisecond, 10}}},
		{"debt", floodgate.Rate{Limit: 2, Period: time.Second}, func(t *testing.T, l floodgate.Limiter, clock *fakeClock) {
			mustNot(t, l.(floodgate.Charger).ChargeN(ctx, "k", 4))
		}, []probe{{500 * time.Millisecond, 0}, {1100 * time.Millisecond, 0}, {1900 * time.Millisecond, 0}, {2100 * time.Millisecond, 0}, {2400 * time.Millisecond, 0}, {2600 * time.Millisecond, 10}}},
	}
	for _, c := range clients(t, addr) {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				mem, err := floodgate.NewSlidingLog(tc.rate, floodgate.WithClock(clock.Now))
				mustNot(t, err)
				rl, err := redisstore.NewSlidingLog(c.s, tc.rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)), patient)
				mustNot(t, err)
				up := floodgate.RateChange{Rate: floodgate.Rate{Limit: 10, Period: time.Second}, Inherit: floodgate.ScaleUsed}
				for _, l := range []floodgate.Limiter{mem, rl} {
					clock.t = t0
					tc.setup(t, l, clock)
					clock.t = t0.Add(500 * time.Millisecond)
					mustNot(t, l.(floodgate.RateSetter).SetRate(ctx, up))
				}
				for _, p := range tc.probes {
					clock.t = t0.Add(p.at)
					m := mustAllowed(t, mem, "k", 0, true)
					r := mustAllowed(t, rl, "k", 0, true)
					if m.Remaining != p.want || r.Remaining != p.want {
						t.Errorf("at %v: Remaining %d in memory, %d on Redis, want %d", p.at, m.Remaining, r.Remaining, p.want)
					}
				}
			})
		}
	}
}

// TestSlidingLogRateChangesMatchMemory walks random programs through a
// Redis sliding log and floodgate.SlidingLog on one fake timeline, with
// and without WithCountDenied: decisions, charges beyond the limit (a
// debt carried into the coming windows), and changes of Limit and Period
// under every Inherit, each followed by a decision on every key (Redis
// converts a key at its next decision, as of the change's time; memory
// at the change). Every Decision must be the same, so that a log carrying
// a debt at a change folds its real units into one entry at the change
// and dates its debt's windows of the new rate from there on both stores
// (see floodgate.SlidingLog.SetRate). Fixed seeds and one random seed,
// logged: FLOODGATE_LOG_SEED=<seed> replays one.
func TestSlidingLogRateChangesMatchMemory(t *testing.T) {
	addr := redistest.Shared(t)
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	random := rand.Uint64()
	if s := os.Getenv("FLOODGATE_LOG_SEED"); s != "" {
		var err error
		if random, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
		seeds = nil
	}
	seeds = append(seeds, random)
	t.Logf("random seed %d (FLOODGATE_LOG_SEED=%d replays it)", random, random)
	changed := 0 // changes met by a key in debt, over every walk
	for _, c := range clients(t, addr) {
		for _, countDenied := range []bool{false, true} {
			for _, seed := range seeds {
				name := fmt.Sprintf("%s/CountDenied=%v/seed%d", c.name, countDenied, seed)
				t.Run(name, func(t *testing.T) {
					clock := &fakeClock{t0}
					rng := rand.New(rand.NewPCG(seed, 33))
					r := logRates[rng.IntN(len(logRates))]
					mopts := []floodgate.Option{floodgate.WithClock(clock.Now)}
					ropts := []redisstore.Option{redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t)), redisstore.WithRateRefresh(time.Millisecond)}
					if countDenied {
						mopts = append(mopts, floodgate.WithCountDenied())
						ropts = append(ropts, redisstore.WithCountDenied())
					}
					mem, err := floodgate.NewSlidingLog(r, mopts...)
					mustNot(t, err)
					rl, err := redisstore.NewSlidingLog(c.s, r, ropts...)
					mustNot(t, err)
					changed += compareRateChanges(t, rng, clock, mem, rl, r)
				})
			}
		}
	}
	t.Logf("%d changes of Limit or Period met a key in debt", changed)
	if changed == 0 {
		t.Error("no change of rate met a key in debt: the walks missed the case")
	}
}

// logRates are the rates the walks of TestSlidingLogRateChangesMatchMemory
// change between: every pair differs in Limit, Period or both.
var logRates = []floodgate.Rate{
	{Limit: 2, Period: time.Second},
	{Limit: 3, Period: time.Second},
	{Limit: 5, Period: 1500 * time.Millisecond},
	{Limit: 10, Period: time.Second},
	{Limit: 3, Period: 3 * time.Second},
	{Limit: 5, Period: 2 * time.Second},
}

// compareRateChanges walks one random program (see
// TestSlidingLogRateChangesMatchMemory) through mem and rl, both at rate
// r, and fails on the first Decision or charge that differs. It returns
// the changes of Limit or Period made while a key carried a debt ahead.
func compareRateChanges(t *testing.T, rng *rand.Rand, clock *fakeClock, mem *floodgate.SlidingLog, rl *redisstore.SlidingLog, r floodgate.Rate) int {
	t.Helper()
	ctx := context.Background()
	keys := []string{"a", "b{x}"}
	hows := []floodgate.Inherit{floodgate.KeepUsed, floodgate.ScaleUsed, floodgate.AddDifference, floodgate.StartFresh}
	changed := 0
	decide := func(i int, key string, n int) floodgate.Decision {
		t.Helper()
		want, werr := mem.AllowN(ctx, key, n)
		want.RetryAfter, want.ResetAfter = roundUp(want.RetryAfter), roundUp(want.ResetAfter)
		got, gerr := rl.AllowN(ctx, key, n)
		if (werr == nil) != (gerr == nil) || got != want {
			t.Fatalf("step %d at +%v, rate %v, AllowN(%q, %d):\n redis  %+v (%v)\n memory %+v (%v)", i, clock.t.Sub(t0), r, key, n, got, gerr, want, werr)
		}
		return want
	}
	for i := range 300 {
		key := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(12); {
		case op < 3:
			n := rng.IntN(3*r.Limit + 1)
			if err1, err2 := mem.ChargeN(ctx, key, n), rl.ChargeN(ctx, key, n); !sameCharge(err1, err2) {
				t.Fatalf("step %d at +%v: ChargeN(%q, %d): in memory %v, on Redis %v", i, clock.t.Sub(t0), key, n, err1, err2)
			}
		case op < 4:
			debt := false
			for _, k := range keys {
				debt = debt || decide(i, k, 0).ResetAfter > r.Period
			}
			to := logRates[rng.IntN(len(logRates))]
			change := floodgate.RateChange{Rate: to, Inherit: hows[rng.IntN(len(hows))]}
			mustNot(t, mem.SetRate(ctx, change))
			mustNot(t, rl.SetRate(ctx, change))
			if debt && to != r {
				changed++
			}
			r = to
			for _, k := range keys {
				decide(i, k, 0) // Redis converts each key now, as memory did
			}
		default:
			n := rng.IntN(min(r.Limit, 4) + 1)
			if rng.IntN(8) == 0 {
				n = r.Limit
			}
			if d := decide(i, key, n); !d.Allowed && rng.IntN(4) == 0 {
				clock.t = clock.t.Add(d.RetryAfter)
			}
		}
		if rng.IntN(2) == 0 {
			step := max(r.Period/time.Duration(4*r.Limit), time.Millisecond).Truncate(time.Millisecond)
			clock.t = clock.t.Add(step * time.Duration(rng.IntN(8)))
		}
	}
	return changed
}
