package floodgate

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

func TestFromRateLimiterValidation(t *testing.T) {
	lim := rate.NewLimiter(1, 1)
	for _, tc := range []struct {
		name string
		l    *rate.Limiter
		opts []Option
	}{
		{"nil limiter", nil, nil},
		{"WithMaxKeys", lim, []Option{WithMaxKeys(10)}},
		{"WithMaxKeyLength", lim, []Option{WithMaxKeyLength(10)}},
		{"WithShards", lim, []Option{WithShards(2)}},
		{"WithBurst", lim, []Option{WithBurst(2)}},
		{"WithIntervalRefill", lim, []Option{WithIntervalRefill()}},
		{"nil clock", lim, []Option{WithClock(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := FromRateLimiter(tc.l, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			assert.Nil(t, s)
		})
	}
	s, err := FromRateLimiter(lim)
	require.NoError(t, err)
	d, err := s.Allow(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the system clock works")
}

// TestSharedLimiterTimeline: 3 per second, burst 3, one budget for all keys.
func TestSharedLimiterTimeline(t *testing.T) {
	clk := newTBClock()
	start := clk.Now()
	lim := rate.NewLimiter(3, 3)
	s, err := FromRateLimiter(lim, WithClock(clk.Now))
	require.NoError(t, err)
	ctx := context.Background()
	third := time.Second / 3 // 333.333333ms
	steps := []struct {
		at   time.Duration
		key  string
		n    int
		want Decision
	}{
		{0, "a", 0, Decision{Allowed: true, Limit: 3, Remaining: 3}},
		{0, "a", 2, Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 2*third + 1}},
		{0, "b", 1, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Second}},
		// x/time/rate allows at 333333333ns: the deficit left (1e-9
		// tokens) is less than a nanosecond's worth.
		{0, "c", 1, Decision{Limit: 3, Remaining: 0, RetryAfter: third, ResetAfter: time.Second}},
		// That leaves the bucket 1e-9 tokens short: full 1ns later.
		{third, "c", 1, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Second + 1}},
	}
	for i, st := range steps {
		clk.Set(start.Add(st.at))
		d, err := s.AllowN(ctx, st.key, st.n)
		require.NoError(t, err)
		assert.Equal(t, st.want, d, "step %d", i)
	}
	assert.InDelta(t, 0, lim.TokensAt(clk.Now()), 1e-8, "denials consumed nothing")
}

// TestSharedLimiterExact checks RetryAfter and ResetAfter against the
// rate.Limiter itself, for rates with and without exact tick lengths. A
// rate.Limiter cannot go back in time and a reserve-and-cancel may move
// its float64 state by a rounding error, so the probe 1ns before RetryAfter
// runs on a replica built by replaying the same calls.
func TestSharedLimiterExact(t *testing.T) {
	ctx := context.Background()
	type call struct {
		at time.Time
		n  int
	}
	replay := func(limit rate.Limit, burst int, log []call) *SharedLimiter {
		lim := rate.NewLimiter(limit, burst)
		var now time.Time
		s, err := FromRateLimiter(lim, WithClock(func() time.Time { return now }))
		require.NoError(t, err)
		for _, c := range log {
			now = c.at
			_, err := s.AllowN(ctx, "k", c.n)
			require.NoError(t, err)
		}
		return s
	}
	for _, tc := range []struct {
		limit rate.Limit
		burst int
	}{
		{3, 3}, {3, 7}, {10, 1}, {rate.Limit(7.0 / 600), 7}, {rate.Every(time.Minute), 2},
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.limit, tc.burst), func(t *testing.T) {
			clk := newTBClock()
			lim := rate.NewLimiter(tc.limit, tc.burst)
			s, err := FromRateLimiter(lim, WithClock(clk.Now))
			require.NoError(t, err)
			var log []call
			allow := func(n int) Decision {
				t.Helper()
				log = append(log, call{clk.Now(), n})
				d, err := s.AllowN(ctx, "k", n)
				require.NoError(t, err)
				require.GreaterOrEqual(t, d.Remaining, 0)
				require.LessOrEqual(t, d.Remaining, d.Limit)
				return d
			}
			tick := time.Duration(float64(time.Second) / float64(tc.limit))
			denials := 0
			for i := 0; i < 120; i++ {
				clk.Advance(tick * time.Duration(i%3) / 2)
				n := 1 + i%tc.burst
				d := allow(n)
				if d.Allowed {
					continue
				}
				denials++
				require.Positive(t, d.RetryAfter)

				replica := replay(tc.limit, tc.burst, log)
				replica.now = func() time.Time { return clk.Now().Add(d.RetryAfter - time.Nanosecond) }
				e, err := replica.AllowN(ctx, "k", n)
				require.NoError(t, err)
				require.False(t, e.Allowed, "step %d: allowed 1ns before RetryAfter %s", i, d.RetryAfter)

				clk.Advance(d.RetryAfter)
				e = allow(n)
				require.True(t, e.Allowed, "step %d: denied at RetryAfter %s", i, d.RetryAfter)
				if e.ResetAfter > 0 && i%4 == 0 {
					replica := replay(tc.limit, tc.burst, log)
					replica.now = func() time.Time { return clk.Now().Add(e.ResetAfter - time.Nanosecond) }
					f, err := replica.AllowN(ctx, "k", 0)
					require.NoError(t, err)
					require.Less(t, f.Remaining, tc.burst, "full before ResetAfter")
					clk.Advance(e.ResetAfter)
					f = allow(0)
					require.Equal(t, tc.burst, f.Remaining, "full at ResetAfter")
				}
			}
			require.Greater(t, denials, 15)
		})
	}
}

func TestSharedLimiterEdges(t *testing.T) {
	ctx := context.Background()
	clk := newTBClock()

	s, err := FromRateLimiter(rate.NewLimiter(1, 2), WithClock(clk.Now))
	require.NoError(t, err)
	d, err := s.AllowN(ctx, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.Equal(t, Decision{Limit: 2}, d)
	_, err = s.AllowN(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	d, err = s.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "failed calls consumed nothing")

	inf, err := FromRateLimiter(rate.NewLimiter(rate.Inf, 0), WithClock(clk.Now))
	require.NoError(t, err)
	d, err = inf.AllowN(ctx, "k", 1000)
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true}, d)

	zero, err := FromRateLimiter(rate.NewLimiter(0, 2), WithClock(clk.Now))
	require.NoError(t, err)
	d, err = zero.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Limit: 2}, d)
	clk.Advance(time.Hour)
	d, err = zero.AllowN(ctx, "k", 1)
	require.ErrorIs(t, err, ErrCostExceedsLimit, "a zero limit never refills")
	assert.False(t, d.Allowed)
}

// TestSharedLimiterInComposite: a server-wide cap in front of per-client
// buckets; a client denied by its own bucket takes nothing from the cap.
func TestSharedLimiterInComposite(t *testing.T) {
	clk := newTBClock()
	server, err := FromRateLimiter(rate.NewLimiter(1, 3), WithClock(clk.Now))
	require.NoError(t, err)
	perClient := newTestBucket(t, PerMinute(2), clk)
	c, err := All(server, perClient)
	require.NoError(t, err)
	ctx := context.Background()
	var got []bool
	for _, key := range []string{"a", "a", "a", "b", "c"} {
		d, err := c.Allow(ctx, key)
		require.NoError(t, err)
		got = append(got, d.Allowed)
	}
	assert.Equal(t, []bool{true, true, false, true, false}, got)
}

// TestCompositeWithUnlimitedRateLimiter: a rate.Limiter at rate.Inf is no
// limit, burst 0 included; All of a bucket and such a limiter decides
// exactly as the bucket alone, step for step, and never answers
// ErrCostExceedsLimit on the unlimited one's account (issue 10 item 11).
func TestCompositeWithUnlimitedRateLimiter(t *testing.T) {
	ctx := context.Background()
	for _, burst := range []int{0, 1, 1000} {
		t.Run("burst "+strconv.Itoa(burst), func(t *testing.T) {
			clk := newTBClock()
			inf, err := FromRateLimiter(rate.NewLimiter(rate.Inf, burst), WithClock(clk.Now))
			require.NoError(t, err)
			alone := newTestBucket(t, PerMinute(3), clk)
			inComposite := newTestBucket(t, PerMinute(3), clk)
			// Both orders: the adapter is consumed last either way, but
			// the decision must not depend on how All was called.
			for _, c := range []*Composite{mustAll(t, inComposite, inf), mustAll(t, inf, inComposite)} {
				for i, n := range []int{0, 1, 2, 1, 0, 3, 4} {
					if i == 4 {
						clk.Advance(40 * time.Second)
					}
					want, wantErr := alone.AllowN(ctx, "k", n)
					got, err := c.AllowN(ctx, "k", n)
					assert.Equal(t, want, got, "step %d, n=%d", i, n)
					if wantErr == nil {
						require.NoError(t, err, "step %d, n=%d", i, n)
					} else {
						require.ErrorIs(t, err, ErrCostExceedsLimit, "step %d: only the bucket's own cap", i)
					}
				}
				clk.Advance(time.Hour)
			}

			nested := mustAll(t, newTestBucket(t, PerMinute(3), clk), mustAll(t, inf))
			d, err := nested.AllowN(ctx, "k", 3)
			require.NoError(t, err, "a Composite of unlimited limiters is unlimited too")
			assert.Equal(t, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Minute}, d)

			only := mustAll(t, inf)
			d, err = only.AllowN(ctx, "k", 1_000_000)
			require.NoError(t, err, "no limit at all: any cost")
			assert.Equal(t, Decision{Allowed: true, Limit: burst, Remaining: burst}, d)
		})
	}
}

// TestCompositeRateLimiterLimitChangedAtRunTime: the unlimited check is
// made on every call, so a cap switched on with SetLimit applies at once,
// and switched off again stops capping.
func TestCompositeRateLimiterLimitChangedAtRunTime(t *testing.T) {
	ctx := context.Background()
	clk := newTBClock()
	rl := rate.NewLimiter(rate.Inf, 0)
	ceiling, err := FromRateLimiter(rl, WithClock(clk.Now))
	require.NoError(t, err)
	c := mustAll(t, newTestBucket(t, PerMinute(100), clk), ceiling)
	for i := 0; i < 5; i++ {
		d, err := c.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	rl.SetLimitAt(clk.Now(), 1)
	rl.SetBurstAt(clk.Now(), 2)
	clk.Advance(2 * time.Second) // x/time/rate refills from what it held: nothing
	var got []bool
	for i := 0; i < 3; i++ {
		d, err := c.Allow(ctx, "k")
		require.NoError(t, err)
		got = append(got, d.Allowed)
	}
	assert.Equal(t, []bool{true, true, false}, got, "a finite limit caps again")
	rl.SetLimitAt(clk.Now(), rate.Inf)
	d, err := c.Allow(ctx, "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 100, d.Limit, "the bucket's numbers, not the lifted cap's")
}

// TestCompositeDegenerateRateLimiters: the rate.Limiters that can never
// allow a cost keep saying so inside a Composite, and consume nothing from
// the other limits.
func TestCompositeDegenerateRateLimiters(t *testing.T) {
	ctx := context.Background()
	clk := newTBClock()
	never, err := FromRateLimiter(rate.NewLimiter(5, 0), WithClock(clk.Now)) // burst 0, finite rate
	require.NoError(t, err)
	b := newTestBucket(t, PerMinute(3), clk)
	_, err = mustAll(t, b, never).Allow(ctx, "k")
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	d, err := b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining, "nothing taken from the bucket")

	once, err := FromRateLimiter(rate.NewLimiter(0, 1), WithClock(clk.Now)) // never refills
	require.NoError(t, err)
	c := mustAll(t, b, once)
	d, err = c.Allow(ctx, "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	clk.Advance(time.Hour)
	_, err = c.Allow(ctx, "k")
	require.ErrorIs(t, err, ErrCostExceedsLimit, "spent for good")
	d, err = b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining, "the refused request was given back")
}

func TestCompositeWithRateLimiterAllocations(t *testing.T) {
	clk := newTBClock()
	inf, err := FromRateLimiter(rate.NewLimiter(rate.Inf, 0), WithClock(clk.Now))
	require.NoError(t, err)
	c := mustAll(t, newTestBucket(t, PerSecond(1000), clk, WithBurst(1<<20)), inf)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Allow(ctx, "hot"); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}

func mustAll(t *testing.T, ls ...Limiter) *Composite {
	t.Helper()
	c, err := All(ls...)
	require.NoError(t, err)
	return c
}
