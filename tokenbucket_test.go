package floodgate

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// tbClock is a fake clock safe for concurrent use.
type tbClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTBClock() *tbClock { return &tbClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *tbClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *tbClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *tbClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func newTestBucket(t testing.TB, r Rate, clk *tbClock, opts ...Option) *TokenBucket {
	t.Helper()
	b, err := NewTokenBucket(r, append([]Option{WithClock(clk.Now)}, opts...)...)
	require.NoError(t, err)
	return b
}

// TestTokenBucketTimeline walks one key through a fixed fake timeline:
// 10 tokens per second (one per 100ms), burst 3.
func TestTokenBucketTimeline(t *testing.T) {
	clk := newTBClock()
	start := clk.Now()
	b := newTestBucket(t, PerSecond(10), clk, WithBurst(3))
	ms := time.Millisecond
	var (
		t0 = start
		t1 = start.Add(50 * ms)
		t2 = start.Add(100 * ms)
		t3 = start.Add(250 * ms)
		t4 = start.Add(250 * ms)
		t5 = start.Add(300 * ms)
		t6 = start.Add(1000 * ms)
		t7 = start.Add(1350 * ms)
		t8 = start.Add(1350 * ms)
		t9 = start.Add(1350 * ms)
	)
	steps := []struct {
		at    time.Time
		n     int
		want  Decision
		isErr error
	}{
		{t0, 1, Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 100 * ms}, nil},
		{t0, 2, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}, nil},
		{t0, 1, Decision{Limit: 3, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 300 * ms}, nil},
		{t1, 1, Decision{Limit: 3, Remaining: 0, RetryAfter: 50 * ms, ResetAfter: 250 * ms}, nil},
		{t2, 1, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}, nil},
		{t3, 0, Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 150 * ms}, nil},
		{t4, 2, Decision{Limit: 3, Remaining: 1, RetryAfter: 50 * ms, ResetAfter: 150 * ms}, nil},
		{t5, 2, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}, nil},
		{t6, 3, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}, nil},
		{t7, 0, Decision{Allowed: true, Limit: 3, Remaining: 3}, nil},
		{t8, 4, Decision{Limit: 3, Remaining: 3}, ErrCostExceedsLimit},
		{t9, 3, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}, nil},
	}
	for i, s := range steps {
		clk.Set(s.at)
		got, err := b.AllowN(context.Background(), "k", s.n)
		if s.isErr != nil {
			require.ErrorIs(t, err, s.isErr, "step %d", i)
		} else {
			require.NoError(t, err, "step %d", i)
		}
		assert.Equal(t, s.want, got, "step %d at +%s, n=%d", i, s.at.Sub(start), s.n)
	}
}

func TestNewTokenBucketValidation(t *testing.T) {
	countDenied := Option(func(c *config) error { c.countDenied = true; return nil })
	tests := []struct {
		name string
		r    Rate
		opts []Option
		want error
	}{
		{"zero limit", Rate{0, time.Second}, nil, ErrInvalidRate},
		{"negative limit", Rate{-1, time.Second}, nil, ErrInvalidRate},
		{"zero period", Rate{1, 0}, nil, ErrInvalidRate},
		{"negative period", Rate{1, -time.Second}, nil, ErrInvalidRate},
		{"limit too large", Rate{maxLimit + 1, time.Second}, nil, ErrInvalidRate},
		{"horizon too long", Rate{1, 1 << 62}, []Option{WithBurst(4)}, ErrInvalidRate},
		{"zero burst", PerSecond(1), []Option{WithBurst(0)}, ErrInvalidOption},
		{"negative burst", PerSecond(1), []Option{WithBurst(-3)}, ErrInvalidOption},
		{"zero max keys", PerSecond(1), []Option{WithMaxKeys(0)}, ErrInvalidOption},
		{"negative max keys", PerSecond(1), []Option{WithMaxKeys(-1)}, ErrInvalidOption},
		{"zero key length", PerSecond(1), []Option{WithMaxKeyLength(0)}, ErrInvalidOption},
		{"shards not a power of two", PerSecond(1), []Option{WithShards(3)}, ErrInvalidOption},
		{"zero shards", PerSecond(1), []Option{WithShards(0)}, ErrInvalidOption},
		{"more shards than keys", PerSecond(1), []Option{WithMaxKeys(4), WithShards(8)}, ErrInvalidOption},
		{"nil clock", PerSecond(1), []Option{WithClock(nil)}, ErrInvalidOption},
		{"nil option", PerSecond(1), []Option{nil}, ErrInvalidOption},
		{"sliding-log option", PerSecond(1), []Option{countDenied}, ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewTokenBucket(tt.r, tt.opts...)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, b)
		})
	}
}

func TestTokenBucketZeroCostDoesNotConsume(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(5), clk)
	ctx := context.Background()

	d, err := b.AllowN(ctx, "untracked", 0)
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Limit: 5, Remaining: 5}, d)
	assert.Equal(t, 0, b.Stats().Keys, "a peek must not create state")

	_, err = b.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		d, err = b.AllowN(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 24 * time.Second}, d)
	}
}

func TestTokenBucketCostAboveBurst(t *testing.T) {
	for _, interval := range []bool{false, true} {
		t.Run(fmt.Sprintf("interval=%v", interval), func(t *testing.T) {
			clk := newTBClock()
			var opts []Option
			if interval {
				opts = append(opts, WithIntervalRefill())
			}
			b := newTestBucket(t, PerMinute(5), clk, opts...)
			ctx := context.Background()
			d, err := b.AllowN(ctx, "k", 6)
			require.ErrorIs(t, err, ErrCostExceedsLimit)
			assert.Equal(t, Decision{Limit: 5, Remaining: 5}, d, "no RetryAfter: waiting cannot help")
			_, err = b.AllowN(ctx, "k", -1)
			require.ErrorIs(t, err, ErrInvalidCost)
			d, err = b.AllowN(ctx, "k", 5)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the failed calls consumed nothing")
		})
	}
}

// exactnessRates covers periods that divide by the limit (no fractions)
// and periods that do not (3/s, 7/10min), with bursts below, at and above
// the limit.
var exactnessRates = []struct {
	r     Rate
	burst int
}{
	{PerSecond(10), 10},
	{PerSecond(10), 3},
	{PerSecond(3), 3},
	{PerSecond(3), 5},
	{Rate{7, 10 * time.Minute}, 7},
	{Rate{7, 10 * time.Minute}, 2},
	{PerHour(1000), 1},
	{PerMinute(1), 4},
}

// TestTokenBucketRetryAndResetExact drives buckets with random traffic
// and checks, at every denial, that a retry 1ns (and 1ms) before
// now+RetryAfter fails and one at now+RetryAfter succeeds; at every step
// that Remaining is within [0, Limit] and exact (Remaining+1 units fail,
// Remaining succeed); and now and then that ResetAfter is exact.
func TestTokenBucketRetryAndResetExact(t *testing.T) {
	ctx := context.Background()
	for _, interval := range []bool{false, true} {
		for _, tc := range exactnessRates {
			name := fmt.Sprintf("%s/burst%d/interval=%v", tc.r, tc.burst, interval)
			t.Run(name, func(t *testing.T) {
				clk := newTBClock()
				opts := []Option{WithBurst(tc.burst)}
				if interval {
					opts = append(opts, WithIntervalRefill())
				}
				b := newTestBucket(t, tc.r, clk, opts...)
				rng := rand.New(rand.NewSource(int64(tc.burst)*1000 + tc.r.Period.Milliseconds()))
				tick := tc.r.Period / time.Duration(tc.r.Limit)
				denials := 0
				for step := 0; step < 600; step++ {
					clk.Advance(time.Duration(rng.Int63n(int64(tick))))
					n := 1 + rng.Intn(tc.burst)
					d, err := b.AllowN(ctx, "k", n)
					require.NoError(t, err)
					require.GreaterOrEqual(t, d.Remaining, 0)
					require.LessOrEqual(t, d.Remaining, d.Limit)
					require.Equal(t, tc.burst, d.Limit)
					if d.Allowed {
						require.Zero(t, d.RetryAfter)
						continue
					}
					denials++
					require.Positive(t, d.RetryAfter)
					for _, early := range []time.Duration{time.Millisecond, time.Nanosecond} {
						if d.RetryAfter <= early {
							continue
						}
						probe := newProbe(clk)
						clk.Advance(d.RetryAfter - early)
						e, err := b.AllowN(ctx, "k", n)
						require.NoError(t, err)
						require.False(t, e.Allowed, "step %d: allowed %s before RetryAfter %s", step, early, d.RetryAfter)
						probe.restore()
					}
					clk.Advance(d.RetryAfter)
					e, err := b.AllowN(ctx, "k", n)
					require.NoError(t, err)
					require.True(t, e.Allowed, "step %d: denied at RetryAfter %s: %+v", step, d.RetryAfter, e)

					// Remaining is exact: one more unit does not fit.
					p, err := b.AllowN(ctx, "k", 0)
					require.NoError(t, err)
					if p.Remaining < tc.burst {
						e, err = b.AllowN(ctx, "k", p.Remaining+1)
						require.NoError(t, err)
						require.False(t, e.Allowed, "Remaining %d is too low", p.Remaining)
					}

					if step%5 == 0 && p.ResetAfter > 0 {
						clk.Advance(p.ResetAfter - time.Nanosecond)
						e, err = b.AllowN(ctx, "k", 0)
						require.NoError(t, err)
						require.Less(t, e.Remaining, tc.burst, "full before ResetAfter %s", p.ResetAfter)
						clk.Advance(time.Nanosecond)
						e, err = b.AllowN(ctx, "k", 0)
						require.NoError(t, err)
						require.Equal(t, tc.burst, e.Remaining, "not full at ResetAfter %s", p.ResetAfter)
						require.Zero(t, e.ResetAfter)
					}
				}
				require.Greater(t, denials, 50, "the traffic must exercise denials")
			})
		}
	}
}

// probe lets a test look ahead in time and come back. Going back is
// allowed only because the probe's AllowN calls are denials, which change
// nothing; the store would otherwise hold the latest time.
type probe struct {
	clk *tbClock
	at  time.Time
}

func newProbe(clk *tbClock) probe { return probe{clk, clk.Now()} }

func (p probe) restore() { p.clk.Set(p.at) }

// TestTokenBucketMatchesXTimeRate is the oracle test: a TokenBucket and a
// golang.org/x/time/rate Limiter with the same rate and burst, driven by
// the same random sequence of (time step, n), must agree on every
// decision.
func TestTokenBucketMatchesXTimeRate(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		r     Rate
		burst int
	}{
		{PerSecond(3), 3},
		{PerSecond(3), 1},
		{Rate{7, 10 * time.Minute}, 7},
		{Rate{7, 10 * time.Minute}, 20},
		{PerSecond(100), 20},
		{PerSecond(10), 10},
		{PerMinute(5), 12},
		{Rate{13, 17 * time.Second}, 4},
	}
	for _, tc := range cases {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/burst%d/seed%d", tc.r, tc.burst, seed), func(t *testing.T) {
				clk := newTBClock()
				b := newTestBucket(t, tc.r, clk, WithBurst(tc.burst))
				oracle := rate.NewLimiter(rate.Limit(float64(tc.r.Limit)/tc.r.Period.Seconds()), tc.burst)
				// Start the oracle full, at the same instant.
				require.True(t, oracle.AllowN(clk.Now(), 0))
				rng := rand.New(rand.NewSource(seed))
				tick := int64(tc.r.Period) / int64(tc.r.Limit)
				allowed, denied := 0, 0
				for step := 0; step < 4000; step++ {
					switch r := rng.Intn(10); {
					case r < 3: // same instant
					case r < 9:
						clk.Advance(time.Duration(rng.Int63n(2 * tick)))
					default: // a long pause
						clk.Advance(time.Duration(rng.Int63n(int64(tc.burst+2) * tick)))
					}
					n := rng.Intn(tc.burst + 2) // sometimes above the burst
					if rng.Intn(3) == 0 {
						n = 1
					}
					d, err := b.AllowN(ctx, "k", n)
					if err != nil {
						require.ErrorIs(t, err, ErrCostExceedsLimit)
						require.Greater(t, n, tc.burst)
					}
					want := oracle.AllowN(clk.Now(), n)
					require.Equal(t, want, d.Allowed, "step %d, n=%d: x/time/rate says %v", step, n, want)
					if d.Allowed {
						allowed++
					} else {
						denied++
					}
				}
				require.Greater(t, allowed, 400)
				require.Greater(t, denied, 400)
			})
		}
	}
}

// TestIntervalRefillTimeline shows interval refill, including the boundary
// double burst that WithIntervalRefill documents.
func TestIntervalRefillTimeline(t *testing.T) {
	clk := newTBClock()
	start := clk.Now()
	b := newTestBucket(t, PerMinute(10), clk, WithIntervalRefill())
	ctx := context.Background()
	s := time.Second
	steps := []struct {
		at   time.Duration
		n    int
		want Decision
	}{
		{0, 1, Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 60 * s}},
		{30 * s, 4, Decision{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: 30 * s}},
		{59990 * time.Millisecond, 5, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 10 * time.Millisecond}},
		{59990 * time.Millisecond, 1, Decision{Limit: 10, Remaining: 0, RetryAfter: 10 * time.Millisecond, ResetAfter: 10 * time.Millisecond}},
		// The period ends: all 10 come back at once. With the 9 above,
		// 19 events happen within 10ms (burst + Limit - 1).
		{60 * s, 10, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 60 * s}},
		{119 * s, 1, Decision{Limit: 10, Remaining: 0, RetryAfter: s, ResetAfter: s}},
		{120 * s, 0, Decision{Allowed: true, Limit: 10, Remaining: 10}},
		// A quiet key starts its next period at its next event.
		{200 * s, 3, Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 60 * s}},
		{259 * s, 0, Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: s}},
	}
	for i, st := range steps {
		clk.Set(start.Add(st.at))
		d, err := b.AllowN(ctx, "k", st.n)
		require.NoError(t, err)
		assert.Equal(t, st.want, d, "step %d at +%s n=%d", i, st.at, st.n)
	}
}

// TestIntervalRefillDoubleBurst measures the largest number of events an
// interval-refilled bucket allows within 10ms around a period boundary:
// burst + Limit - 1, against burst for the greedy default.
func TestIntervalRefillDoubleBurst(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		interval bool
		burst    int
		want     int
	}{
		{true, 10, 19},
		{true, 20, 29},
		{false, 10, 10},
		{false, 20, 20},
	} {
		t.Run(fmt.Sprintf("interval=%v/burst%d", tc.interval, tc.burst), func(t *testing.T) {
			clk := newTBClock()
			start := clk.Now()
			opts := []Option{WithBurst(tc.burst)}
			if tc.interval {
				opts = append(opts, WithIntervalRefill())
			}
			b := newTestBucket(t, PerMinute(10), clk, opts...)
			d, err := b.AllowN(ctx, "k", 1) // starts the period
			require.NoError(t, err)
			require.True(t, d.Allowed)
			count := 0
			for _, at := range []time.Duration{59995 * time.Millisecond, 60 * time.Second, 60005 * time.Millisecond} {
				clk.Set(start.Add(at))
				for {
					d, err := b.AllowN(ctx, "k", 1)
					require.NoError(t, err)
					if !d.Allowed {
						break
					}
					count++
				}
			}
			assert.Equal(t, tc.want, count)
		})
	}
}

func TestTokenBucketRefund(t *testing.T) {
	ctx := context.Background()
	for _, interval := range []bool{false, true} {
		t.Run(fmt.Sprintf("interval=%v", interval), func(t *testing.T) {
			clk := newTBClock()
			opts := []Option{WithBurst(6)}
			if interval {
				opts = append(opts, WithIntervalRefill())
			}
			b := newTestBucket(t, PerSecond(3), clk, opts...)
			remaining := func() int {
				d, err := b.AllowN(ctx, "k", 0)
				require.NoError(t, err)
				return d.Remaining
			}

			require.NoError(t, b.RefundN(ctx, "k", 2))
			assert.Equal(t, 0, b.Stats().Keys, "refunding an untracked key creates nothing")

			d, err := b.AllowN(ctx, "k", 5)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, 1, remaining())
			require.NoError(t, b.RefundN(ctx, "k", 3))
			assert.Equal(t, 4, remaining(), "refund gives the units back")
			require.NoError(t, b.RefundN(ctx, "k", 0))
			assert.Equal(t, 4, remaining())
			require.NoError(t, b.RefundN(ctx, "k", 100))
			assert.Equal(t, 6, remaining(), "never above the burst")
			d, err = b.AllowN(ctx, "k", 6)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "a full bucket after the refund")

			require.ErrorIs(t, b.RefundN(ctx, "k", -1), ErrInvalidCost)
		})
	}
}

// TestTokenBucketRefundIsExact checks that a refund undoes a take exactly
// in greedy mode, with fractions: take-then-refund leaves the same state
// as never taking, whatever happened in between.
func TestTokenBucketRefundIsExact(t *testing.T) {
	ctx := context.Background()
	clk := newTBClock()
	a := newTestBucket(t, Rate{7, 10 * time.Minute}, clk, WithBurst(5))
	rng := rand.New(rand.NewSource(7))
	for step := 0; step < 500; step++ {
		clk.Advance(time.Duration(rng.Int63n(int64(2 * time.Minute))))
		n := 1 + rng.Intn(2)
		// "with" takes n and gives it back later; "without" never takes it.
		d, err := a.AllowN(ctx, "with", n)
		require.NoError(t, err)
		if d.Allowed {
			other := 1 + rng.Intn(2)
			ow, err := a.AllowN(ctx, "with", other)
			require.NoError(t, err)
			oo, err := a.AllowN(ctx, "without", other)
			require.NoError(t, err)
			require.NoError(t, a.RefundN(ctx, "with", n))
			if ow.Allowed != oo.Allowed {
				// The n units made the difference; start both afresh.
				require.NoError(t, a.Reset(ctx, "with"))
				require.NoError(t, a.Reset(ctx, "without"))
				continue
			}
		}
		pw, err := a.AllowN(ctx, "with", 0)
		require.NoError(t, err)
		po, err := a.AllowN(ctx, "without", 0)
		require.NoError(t, err)
		require.Equal(t, po, pw, "step %d", step)
	}
}

func TestTokenBucketReset(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerHour(2), clk)
	ctx := context.Background()
	_, err := b.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	d, err := b.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.NoError(t, b.Reset(ctx, "k"))
	assert.Equal(t, 0, b.Stats().Keys)
	d, err = b.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	require.NoError(t, b.Reset(ctx, "never seen"))
}

func TestTokenBucketAccessors(t *testing.T) {
	b, err := NewTokenBucket(PerMinute(10), WithBurst(3))
	require.NoError(t, err)
	assert.Equal(t, PerMinute(10), b.Rate())
	assert.Equal(t, 3, b.Burst())
	d, err := b.Allow(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the default system clock works")
	assert.Equal(t, 2, d.Remaining)
}

// TestTokenBucketConcurrentExact: at a frozen clock, many goroutines on
// one key get exactly the burst between them.
func TestTokenBucketConcurrentExact(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(100), clk, WithBurst(37))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
	)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				d, err := b.Allow(context.Background(), "hot")
				if err != nil || !d.Allowed {
					continue
				}
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 37, allowed)
}

func TestTokenBucketHotPathDoesNotAllocate(t *testing.T) {
	clk := newTBClock()
	for _, r := range []Rate{PerSecond(10), PerSecond(3)} {
		b := newTestBucket(t, r, clk, WithBurst(1<<20))
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := b.Allow(ctx, "hot"); err != nil {
				panic(err)
			}
		})
		assert.Zero(t, allocs, "%s", r)
		allocs = testing.AllocsPerRun(1000, func() {
			if _, err := b.AllowN(ctx, "untracked", 0); err != nil {
				panic(err)
			}
		})
		assert.Zero(t, allocs, "peek at an untracked key, %s", r)
	}
}
