package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// This file holds the tests that hold for every Limiter. The in-memory
// limiters run the same conformance suite as every other store; the
// contract tests below walk every in-memory limiter, including those the
// suite does not cover (interval refill, counted denials, the rate.Limiter
// adapter, a composite), through the promises of the Limiter and Decision
// docs.

func TestTokenBucketConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Suite{
		Algorithm: floodgatetest.TokenBucket,
		New: func(c floodgatetest.Config) (floodgatetest.Limiter, error) {
			return floodgate.NewTokenBucket(c.Rate, floodgate.WithClock(c.Clock.Now))
		},
	})
}

func TestTokenBucketWithBurstConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Suite{
		Algorithm: floodgatetest.TokenBucket,
		Bursts:    true,
		New: func(c floodgatetest.Config) (floodgatetest.Limiter, error) {
			return floodgate.NewTokenBucket(c.Rate, floodgate.WithBurst(c.Burst), floodgate.WithClock(c.Clock.Now))
		},
	})
}

func TestIntervalTokenBucketConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Suite{
		Algorithm: floodgatetest.IntervalTokenBucket,
		Bursts:    true,
		New: func(c floodgatetest.Config) (floodgatetest.Limiter, error) {
			return floodgate.NewTokenBucket(c.Rate, floodgate.WithBurst(c.Burst), floodgate.WithIntervalRefill(), floodgate.WithClock(c.Clock.Now))
		},
	})
}

func TestSlidingLogConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Suite{
		Algorithm: floodgatetest.SlidingLog,
		New: func(c floodgatetest.Config) (floodgatetest.Limiter, error) {
			return floodgate.NewSlidingLog(c.Rate, floodgate.WithClock(c.Clock.Now))
		},
	})
}

func TestSlidingCounterConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Suite{
		Algorithm: floodgatetest.SlidingCounter,
		New: func(c floodgatetest.Config) (floodgatetest.Limiter, error) {
			return floodgate.NewSlidingCounter(c.Rate, floodgate.WithClock(c.Clock.Now))
		},
	})
}

// limiterCase is one in-memory limiter configuration, built on a test
// clock.
type limiterCase struct {
	name string
	// quota is Decision.Limit: the capacity or the events per period.
	quota int
	// composite: Decision.Limit and Remaining are those of the most
	// restrictive limit at the time, so Limit varies and Remaining ==
	// Limit does not mean that every limit is full.
	composite bool
	// shared: one limit for every key (FromRateLimiter).
	shared bool
	// resolution is the step of the limiter's clock arithmetic:
	// RetryAfter and ResetAfter are exact to it.
	resolution time.Duration
	// deniedMayCount: a denied request may change the state (a sliding
	// log counting denials; the rate.Limiter adapter, whose cancelled
	// reservation is restored in float64 and may be off by a nanosecond),
	// so an early retry must not be probed before the real one.
	deniedMayCount bool
	new            func(now func() time.Time) (floodgate.Limiter, error)
}

// inMemoryLimiters lists every in-memory Limiter the package builds. A
// new limiter or option that changes decisions belongs here.
func inMemoryLimiters() []limiterCase {
	r := floodgate.Rate{Limit: 5, Period: time.Minute}
	return []limiterCase{
		{name: "TokenBucket", quota: 5, resolution: time.Nanosecond, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, floodgate.WithClock(now))
		}},
		{name: "TokenBucket/WithBurst", quota: 8, resolution: time.Nanosecond, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, floodgate.WithBurst(8), floodgate.WithClock(now))
		}},
		{name: "TokenBucket/WithIntervalRefill", quota: 5, resolution: time.Nanosecond, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, floodgate.WithIntervalRefill(), floodgate.WithClock(now))
		}},
		{name: "SlidingLog", quota: 5, resolution: 50 * time.Nanosecond, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewSlidingLog(r, floodgate.WithClock(now))
		}},
		{name: "SlidingLog/WithCountDenied", quota: 5, resolution: 50 * time.Nanosecond, deniedMayCount: true, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewSlidingLog(r, floodgate.WithCountDenied(), floodgate.WithClock(now))
		}},
		{name: "SlidingCounter", quota: 5, resolution: time.Nanosecond, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.NewSlidingCounter(r, floodgate.WithClock(now))
		}},
		{name: "FromRateLimiter", quota: 5, shared: true, resolution: time.Nanosecond, deniedMayCount: true, new: func(now func() time.Time) (floodgate.Limiter, error) {
			return floodgate.FromRateLimiter(rate.NewLimiter(rate.Every(r.Period/time.Duration(r.Limit)), r.Limit), floodgate.WithClock(now))
		}},
		{name: "All(TokenBucket,SlidingLog)", quota: 5, composite: true, resolution: 2 * time.Microsecond, new: func(now func() time.Time) (floodgate.Limiter, error) {
			perMinute, err := floodgate.NewTokenBucket(r, floodgate.WithClock(now))
			if err != nil {
				return nil, err
			}
			perHour, err := floodgate.NewSlidingLog(floodgate.PerHour(12), floodgate.WithClock(now))
			if err != nil {
				return nil, err
			}
			return floodgate.All(perMinute, perHour)
		}},
	}
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// TestLimiterZeroCostReportsWithoutConsuming: AllowN(ctx, key, 0) is
// allowed, reports the key as it is, and changes nothing, on a fresh, a
// partly used and a drained key.
func TestLimiterZeroCostReportsWithoutConsuming(t *testing.T) {
	ctx := context.Background()
	for _, c := range inMemoryLimiters() {
		t.Run(c.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			lim, err := c.new(clock.Now)
			if err != nil {
				t.Fatal(err)
			}
			report := func(want int) {
				t.Helper()
				first, err := lim.AllowN(ctx, "k", 0)
				if err != nil {
					t.Fatal(err)
				}
				if !first.Allowed || first.Remaining != want || first.Limit != c.quota || first.RetryAfter != 0 {
					t.Errorf("report %+v, want allowed, Remaining %d, Limit %d, RetryAfter 0", first, want, c.quota)
				}
				for range 3 {
					if d, _ := lim.AllowN(ctx, "k", 0); d != first {
						t.Errorf("repeated report %+v, first %+v", d, first)
					}
				}
			}
			report(c.quota)
			if d, _ := lim.AllowN(ctx, "k", 0); d.ResetAfter != 0 {
				t.Errorf("fresh key: ResetAfter %v, want 0", d.ResetAfter)
			}
			if d, err := lim.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
				t.Fatalf("AllowN(2) = %+v, %v", d, err)
			}
			report(c.quota - 2)
			if d, err := lim.AllowN(ctx, "k", c.quota-2); err != nil || !d.Allowed {
				t.Fatalf("AllowN(%d) = %+v, %v", c.quota-2, d, err)
			}
			report(0)
			if d, _ := lim.AllowN(ctx, "k", 1); d.Allowed {
				t.Errorf("drained key allowed one more: %+v", d)
			}
		})
	}
}

// TestLimiterContractRandomWalk drives every in-memory limiter through a
// random timeline of costs and waits, and checks each Decision against
// the Limiter docs: Remaining within 0..Limit, RetryAfter zero when
// allowed and positive when denied, a retry RetryAfter later allowed and
// one step of the limiter's resolution earlier denied, and the whole
// quota back ResetAfter later (not a step earlier).
func TestLimiterContractRandomWalk(t *testing.T) {
	ctx := context.Background()
	for _, c := range inMemoryLimiters() {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				walk(t, ctx, c, seed)
			}
		})
	}
}

func walk(t *testing.T, ctx context.Context, c limiterCase, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 15))
	clock := floodgatetest.NewClock(t0)
	lim, err := c.new(clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c"}
	if c.shared {
		keys = keys[:1] // every key is the same limit
	}
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d at +%v: %s", seed, step, clock.Now().Sub(t0), fmt.Sprintf(format, args...))
	}
	for step := range 300 {
		// Mostly short waits, so that keys are often limited.
		clock.Advance(time.Duration(rng.Int64N(int64(20 * time.Second))))
		key := keys[rng.IntN(len(keys))]
		n := rng.IntN(c.quota + 1)
		d, err := lim.AllowN(ctx, key, n)
		if err != nil {
			fail(step, "AllowN(%q, %d): %v", key, n, err)
		}
		if d.Limit != c.quota && !c.composite {
			fail(step, "Limit %d, want %d", d.Limit, c.quota)
		}
		if d.Remaining < 0 || d.Remaining > d.Limit {
			fail(step, "Remaining %d outside 0..%d", d.Remaining, d.Limit)
		}
		if d.ResetAfter < 0 {
			fail(step, "negative ResetAfter %v", d.ResetAfter)
		}
		if d.Allowed {
			if d.RetryAfter != 0 {
				fail(step, "allowed with RetryAfter %v", d.RetryAfter)
			}
		} else {
			if n == 0 {
				fail(step, "AllowN(0) denied: %+v", d)
			}
			if d.RetryAfter <= 0 {
				fail(step, "denied with RetryAfter %v", d.RetryAfter)
			}
			// A denial consumed nothing, so the same request fits exactly
			// RetryAfter later and not a resolution step before.
			if d.RetryAfter > c.resolution && !c.deniedMayCount {
				clock.Advance(d.RetryAfter - c.resolution)
				if early, err := lim.AllowN(ctx, key, n); err != nil || early.Allowed {
					fail(step, "AllowN(%d) %v before RetryAfter %v: %+v, %v", n, c.resolution, d.RetryAfter, early, err)
				}
				clock.Advance(c.resolution)
			} else {
				clock.Advance(d.RetryAfter)
			}
			if retry, err := lim.AllowN(ctx, key, n); err != nil || !retry.Allowed {
				fail(step, "AllowN(%d) RetryAfter %v later: %+v, %v", n, d.RetryAfter, retry, err)
			}
		}
		if step%25 == 24 {
			// Nothing else consumes: ResetAfter later the key is full.
			now, _ := lim.AllowN(ctx, key, 0)
			if now.ResetAfter > c.resolution {
				clock.Advance(now.ResetAfter - c.resolution)
				early, _ := lim.AllowN(ctx, key, 0)
				if early.ResetAfter == 0 || (early.Remaining == early.Limit && !c.composite) {
					fail(step, "full %v before ResetAfter %v: %+v", c.resolution, now.ResetAfter, early)
				}
				clock.Advance(c.resolution)
			} else {
				clock.Advance(now.ResetAfter)
			}
			if full, _ := lim.AllowN(ctx, key, 0); full.Remaining != full.Limit || full.ResetAfter != 0 {
				fail(step, "ResetAfter %v later: %+v, want the whole quota", now.ResetAfter, full)
			}
		}
	}
}

// TestLimiterErrors: every error is one of the documented sentinels, comes
// with a denied Decision, and consumes nothing.
func TestLimiterErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range inMemoryLimiters() {
		t.Run(c.name, func(t *testing.T) {
			lim, err := c.new(floodgatetest.NewClock(t0).Now)
			if err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				name string
				key  string
				n    int
				want error
			}{
				{"negative cost", "k", -1, floodgate.ErrInvalidCost},
				{"cost above the quota", "k", c.quota + 1, floodgate.ErrCostExceedsLimit},
				{"huge cost", "k", int(^uint(0) >> 1), floodgate.ErrCostExceedsLimit},
			}
			if !c.shared {
				tests = append(tests, struct {
					name string
					key  string
					n    int
					want error
				}{"key too long", strings.Repeat("x", floodgate.DefaultMaxKeyLength+1), 1, floodgate.ErrKeyTooLong})
			}
			for _, tt := range tests {
				d, err := lim.AllowN(ctx, tt.key, tt.n)
				if !errors.Is(err, tt.want) {
					t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
				}
				if d.Allowed || d.RetryAfter != 0 {
					t.Errorf("%s: Decision %+v, want denied without RetryAfter", tt.name, d)
				}
			}
			if d, _ := lim.AllowN(ctx, "k", 0); d.Remaining != c.quota {
				t.Errorf("after the errors: Remaining %d, want the whole quota %d", d.Remaining, c.quota)
			}
		})
	}
}

// TestLimiterConstructorErrors: an impossible configuration is refused by
// every constructor with a sentinel, never accepted or a panic.
func TestLimiterConstructorErrors(t *testing.T) {
	constructors := map[string]func(floodgate.Rate, ...floodgate.Option) (floodgate.Limiter, error){
		"NewTokenBucket": func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, o...)
		},
		"NewSlidingLog": func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewSlidingLog(r, o...)
		},
		"NewSlidingCounter": func(r floodgate.Rate, o ...floodgate.Option) (floodgate.Limiter, error) {
			return floodgate.NewSlidingCounter(r, o...)
		},
	}
	tests := []struct {
		name string
		rate floodgate.Rate
		opts []floodgate.Option
		want error
	}{
		{"zero limit", floodgate.Rate{Limit: 0, Period: time.Second}, nil, floodgate.ErrInvalidRate},
		{"negative period", floodgate.Rate{Limit: 1, Period: -time.Second}, nil, floodgate.ErrInvalidRate},
		{"limit above 2^24", floodgate.Rate{Limit: 1<<24 + 1, Period: time.Hour}, nil, floodgate.ErrInvalidRate},
		{"zero max keys", floodgate.PerSecond(1), []floodgate.Option{floodgate.WithMaxKeys(0)}, floodgate.ErrInvalidOption},
		{"nil clock", floodgate.PerSecond(1), []floodgate.Option{floodgate.WithClock(nil)}, floodgate.ErrInvalidOption},
		{"nil option", floodgate.PerSecond(1), []floodgate.Option{nil}, floodgate.ErrInvalidOption},
	}
	for name, newLimiter := range constructors {
		for _, tt := range tests {
			if _, err := newLimiter(tt.rate, tt.opts...); !errors.Is(err, tt.want) {
				t.Errorf("%s, %s: error %v, want %v", name, tt.name, err, tt.want)
			}
		}
		// The largest supported limit is accepted: 2^24, or
		// MaxSlidingLogLimit for a sliding log, which keeps an entry per
		// decision.
		largest := 1 << 24
		if name == "NewSlidingLog" {
			largest = floodgate.MaxSlidingLogLimit
		}
		if _, err := newLimiter(floodgate.Rate{Limit: largest, Period: time.Hour}); err != nil {
			t.Errorf("%s: limit %d: %v", name, largest, err)
		}
		if _, err := newLimiter(floodgate.Rate{Limit: largest + 1, Period: time.Hour}); !errors.Is(err, floodgate.ErrInvalidRate) {
			t.Errorf("%s: limit %d: error %v, want ErrInvalidRate", name, largest+1, err)
		}
	}
}

// TestRateLargestLimit: 2^24 events per period is the largest limit every
// limiter accepts; one more is refused with a message that names the bound
// and what to do instead, and the documented way round it (the same rate
// over a shorter period) is accepted.
func TestRateLargestLimit(t *testing.T) {
	require.NoError(t, floodgate.Rate{Limit: 1 << 24, Period: time.Hour}.Validate())
	err := floodgate.Rate{Limit: 1<<24 + 1, Period: time.Hour}.Validate()
	require.ErrorIs(t, err, floodgate.ErrInvalidRate)
	for _, want := range []string{"16777216", "2^24", "shorter period", "coarser unit"} {
		assert.True(t, strings.Contains(err.Error(), want), "error %q does not say %q", err, want)
	}

	// 100,000,000 an hour, as the Rate documentation restates it.
	scaled := floodgate.Rate{Limit: 1_000_000, Period: 36 * time.Second}
	_, err = floodgate.NewTokenBucket(floodgate.Rate{Limit: 100_000_000, Period: time.Hour})
	require.ErrorIs(t, err, floodgate.ErrInvalidRate)
	for name, build := range map[string]func() error{
		"token bucket":    func() error { _, err := floodgate.NewTokenBucket(scaled, floodgate.WithBurst(1<<24)); return err },
		"sliding counter": func() error { _, err := floodgate.NewSlidingCounter(scaled); return err },
	} {
		assert.NoError(t, build(), name)
	}
	// A sliding log keeps an entry per decision: it stops at
	// MaxSlidingLogLimit and says what to use instead.
	_, err = floodgate.NewSlidingLog(scaled)
	require.ErrorIs(t, err, floodgate.ErrInvalidRate)
	assert.Contains(t, err.Error(), "SlidingCounter")
	_, err = floodgate.NewSlidingLog(floodgate.Rate{Limit: floodgate.MaxSlidingLogLimit, Period: time.Hour})
	assert.NoError(t, err)
	assert.Equal(t, 100_000_000.0, float64(scaled.Limit)*float64(time.Hour)/float64(scaled.Period))
}
