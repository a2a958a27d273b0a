package redisstore_test

import (
	"context"
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
//     to 10/s at 0.5 s: the debt gains 8, as its last window of 2 would,
//     and keeps the 2 at 0 s: 10 owed for 1 s, no room until 2 s.
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
		}, []probe{{500 * time.Millisecond, 0}, {1100 * time.Millisecond, 0}, {1900 * time.Millisecond, 0}, {2100 * time.Millisecond, 10}}},
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
