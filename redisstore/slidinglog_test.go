package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSlidingLogWeighted walks a weighted log through a fixed timeline,
// with and without WithCountDenied. A decision of cost n at now expires
// the entries at or before now-Period, is allowed iff used+n <= Limit,
// records one entry of weight n when allowed (or, counting denials, after
// dropping the oldest units so that the log holds Limit with it); a
// denied request fits once enough of the oldest units have left the
// window.
func TestSlidingLogWeighted(t *testing.T) {
	addr := redistest.Shared(t)
	type step struct {
		at          time.Duration
		n           int
		allowed     bool
		remaining   int
		retry, rest time.Duration
	}
	s := time.Second
	cases := []struct {
		name        string
		countDenied bool
		steps       []step
	}{
		{"plain", false, []step{
			{0, 4, true, 6, 0, 10 * s},
			{2 * s, 5, true, 1, 0, 10 * s},
			{3 * s, 0, true, 1, 0, 9 * s},       // a report records nothing
			{3 * s, 3, false, 1, 7 * s, 9 * s},  // 2 units must leave: the entry of 4 at 0 s
			{10 * s, 3, true, 2, 0, 10 * s},     // the 4 left at 10 s
			{12 * s, 8, false, 7, 8 * s, 8 * s}, // the 5 left at 12 s, the 3 holds until 20 s
			{12 * s, 7, true, 0, 0, 10 * s},
		}},
		{"count denied", true, []step{
			{0, 4, true, 6, 0, 10 * s},
			{2 * s, 5, true, 1, 0, 10 * s},
			// Denied and recorded: the 2 oldest units go (the entry of 4
			// keeps 2), the log holds 2+5+3 = 10; 3 units must leave: the
			// 2 at 0 s and 1 of the 5 at 2 s.
			{3 * s, 3, false, 0, 9 * s, 10 * s},
			// The 2 left at 10 s: 5+3 held, the attempt drops 1 more of
			// the 5 (4+3+3); the 3 units it needs leave with the 4 at 12 s.
			{10 * s, 3, false, 0, 2 * s, 10 * s},
		}},
	}
	for _, c := range clients(t, addr) {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t))}
				if tc.countDenied {
					opts = append(opts, redisstore.WithCountDenied())
				}
				l, err := redisstore.NewSlidingLog(c.s, floodgate.Rate{Limit: 10, Period: 10 * s}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				for i, st := range tc.steps {
					clock.t = t0.Add(st.at)
					d, err := l.AllowN(context.Background(), "k", st.n)
					want := floodgate.Decision{Allowed: st.allowed, Limit: 10, Remaining: st.remaining, RetryAfter: st.retry, ResetAfter: st.rest}
					if err != nil || d != want {
						t.Fatalf("step %d at +%v, n=%d: %+v, %v; want %+v", i, st.at, st.n, d, err, want)
					}
				}
			})
		}
	}
}

// TestSlidingLogCostIsOneEntry: AllowN(n) records one entry whatever n,
// even the largest limit spent at once, and a denial then costs the same;
// a limit above 65536 is refused at construction.
func TestSlidingLogCostIsOneEntry(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			l, err := redisstore.NewSlidingLog(c.s, floodgate.Rate{Limit: 1 << 16, Period: time.Minute}, patient, redisstore.WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			mustAllowed(t, l, "k", 1<<16, true)
			d := mustAllowed(t, l, "k", 1, false)
			took := time.Since(start)
			if n, _ := rdb.ZCard(ctx, p+":{k}:log").Result(); n != 2 {
				t.Fatalf("log of AllowN(65536) holds %d members, want 2 (the entry and the low mark)", n)
			}
			if d.Remaining != 0 || d.RetryAfter <= 59*time.Second || d.RetryAfter > time.Minute {
				t.Fatalf("denial after the whole quota at once: %+v", d)
			}
			t.Logf("AllowN(65536) and a denial: %v", took)
			// Unweighted, these two calls wrote 65,536 members (tens of
			// milliseconds of server time at least).
			if took > time.Second {
				t.Errorf("AllowN(65536) and a denial took %v", took)
			}
		})
	}
	if _, err := redisstore.NewSlidingLog(clients(t, addr)[0].s, floodgate.Rate{Limit: 1<<16 + 1, Period: time.Minute}); !errors.Is(err, floodgate.ErrInvalidRate) {
		t.Fatalf("Limit 65537: %v, want ErrInvalidRate", err)
	}
}

// TestSlidingLogLongRunMatchesMemory walks 3,000 random steps (costs up to
// the limit, refunds, waits of up to two periods) through a Redis log and
// floodgate.SlidingLog, with and without WithCountDenied, so that entries
// age out a few at a time and all at once, dead entries are swept 16 at a
// time, and logs empty and refill: every Decision must agree.
func TestSlidingLogLongRunMatchesMemory(t *testing.T) {
	addr := redistest.Shared(t)
	r := floodgate.Rate{Limit: 40, Period: 2 * time.Second}
	for _, c := range clients(t, addr) {
		for _, countDenied := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/countDenied=%v", c.name, countDenied), func(t *testing.T) {
				clock := &fakeClock{t0}
				mopts := []floodgate.Option{floodgate.WithClock(clock.Now)}
				ropts := []redisstore.Option{redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(prefix(t))}
				if countDenied {
					mopts = append(mopts, floodgate.WithCountDenied())
					ropts = append(ropts, redisstore.WithCountDenied())
				}
				mem, err := floodgate.NewSlidingLog(r, mopts...)
				if err != nil {
					t.Fatal(err)
				}
				rl, err := redisstore.NewSlidingLog(c.s, r, ropts...)
				if err != nil {
					t.Fatal(err)
				}
				compareSteps(t, clock, mem, rl, r.Limit, r.Period, 3000)
			})
		}
	}
}

// TestSlidingLogTotalsWrap: the running totals that name a log's entries
// are kept modulo 2^48; a log whose totals wrap around decides as any
// other. The log is written by hand: low 2^48-5, an entry of 2 units at
// -2 s (total 2^48-3) and one of 4 at -1 s (total 1, wrapped).
func TestSlidingLogTotalsWrap(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const mod = 1 << 48
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			clock := &fakeClock{t0}
			l, err := redisstore.NewSlidingLog(c.s, floodgate.Rate{Limit: 10, Period: 10 * time.Second},
				redisstore.WithClock(clock.Now), patient, redisstore.WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			now := t0.UnixMicro()
			key := p + ":{k}:log"
			rdb.ZAdd(ctx, key,
				redis.Z{Score: -1 - float64(mod-5), Member: "low"},
				redis.Z{Score: float64(now - 2e6), Member: strconv.Itoa(mod - 3)},
				redis.Z{Score: float64(now - 1e6), Member: "1"})
			rdb.Expire(ctx, key, time.Minute)
			if d := mustAllowed(t, l, "k", 4, true); d.Remaining != 0 {
				t.Fatalf("AllowN(4) on 6 of 10 units: %+v, want Remaining 0", d)
			}
			d := mustAllowed(t, l, "k", 3, false)
			// 3 units must leave: the 2 at -2 s and the 4 at -1 s.
			if d.RetryAfter != 9*time.Second || d.ResetAfter != 10*time.Second {
				t.Fatalf("AllowN(3) on a full log: %+v, want RetryAfter 9s, ResetAfter 10s", d)
			}
			clock.t = t0.Add(8 * time.Second) // the entry at -2 s leaves
			mustAllowed(t, l, "k", 2, true)
			if m, _ := rdb.ZRange(ctx, key, 0, -1).Result(); !slices.Equal(m, []string{"low", "1", "5", "7"}) {
				t.Fatalf("log after the wrap: %q, want [low 1 5 7]", m)
			}
		})
	}
}
