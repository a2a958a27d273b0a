package floodgate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllValidation(t *testing.T) {
	_, err := All()
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = All(nil)
	require.ErrorIs(t, err, ErrInvalidOption)
	var nilBucket *TokenBucket
	_, err = All(nilBucket)
	require.ErrorIs(t, err, ErrInvalidOption, "a typed nil pointer is nil too")
	var nilFunc limiterFunc
	_, err = All(nilFunc)
	require.ErrorIs(t, err, ErrInvalidOption)
	b, err := NewTokenBucket(PerMinute(1))
	require.NoError(t, err)
	_, err = All(b, nil)
	require.ErrorIs(t, err, ErrInvalidOption)
	c, err := All(b)
	require.NoError(t, err)
	require.NotNil(t, c)
}

// TestCompositeTimeline: 2 per minute and 3 per hour on one key. A request
// denied by one limit consumes from neither; the decision reports the most
// restrictive limit.
func TestCompositeTimeline(t *testing.T) {
	clk := newTBClock()
	start := clk.Now()
	minute := newTestBucket(t, PerMinute(2), clk) // a token every 30s
	hour := newTestBucket(t, PerHour(3), clk)     // a token every 20m
	c, err := All(minute, hour)
	require.NoError(t, err)
	ctx := context.Background()
	s, m := time.Second, time.Minute
	steps := []struct {
		at   time.Duration
		n    int
		want Decision
	}{
		{0, 0, Decision{Allowed: true, Limit: 2, Remaining: 2}},
		{0, 1, Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 20 * m}},
		{0, 1, Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 40 * m}},
		// The minute limit denies: RetryAfter and Limit are its own.
		{0, 1, Decision{Limit: 2, Remaining: 0, RetryAfter: 30 * s, ResetAfter: 40 * m}},
		{30 * s, 1, Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 59*m + 30*s}},
		// The minute limit has room, the hour limit does not.
		{60 * s, 1, Decision{Limit: 3, Remaining: 0, RetryAfter: 19 * m, ResetAfter: 59 * m}},
		{60 * s, 0, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 59 * m}},
		{20 * m, 1, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 60 * m}},
	}
	for i, st := range steps {
		clk.Set(start.Add(st.at))
		d, err := c.AllowN(ctx, "k", st.n)
		require.NoError(t, err)
		assert.Equal(t, st.want, d, "step %d at +%s n=%d", i, st.at, st.n)
	}
	// The denials consumed nothing from the limit that had room.
	d, err := minute.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Remaining)
}

func TestCompositeRetryAfterFitsEveryLimit(t *testing.T) {
	clk := newTBClock()
	a := newTestBucket(t, PerSecond(3), clk)
	b := newTestBucket(t, Rate{7, 10 * time.Minute}, clk, WithBurst(4))
	c, err := All(a, b)
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		d, err := c.AllowN(ctx, "k", 1+i%3)
		require.NoError(t, err)
		if d.Allowed {
			clk.Advance(time.Duration(i) * 7 * time.Millisecond)
			continue
		}
		p := newProbe(clk)
		clk.Advance(d.RetryAfter - time.Nanosecond)
		e, err := c.AllowN(ctx, "k", 1+i%3)
		require.NoError(t, err)
		require.False(t, e.Allowed, "step %d: allowed before RetryAfter", i)
		p.restore()
		clk.Advance(d.RetryAfter)
		e, err = c.AllowN(ctx, "k", 1+i%3)
		require.NoError(t, err)
		require.True(t, e.Allowed, "step %d: denied at RetryAfter", i)
	}
}

func TestCompositeCostExceedsAnyLimit(t *testing.T) {
	clk := newTBClock()
	small := newTestBucket(t, PerMinute(2), clk)
	big := newTestBucket(t, PerHour(100), clk)
	c, err := All(big, small)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := c.AllowN(ctx, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.False(t, d.Allowed)
	assert.Zero(t, d.RetryAfter)
	_, err = c.AllowN(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	p, err := big.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 100, p.Remaining, "nothing consumed")
}

// racyLimiter says it has room when peeked, then denies the take, as if a
// concurrent caller had taken the last units in between. It counts takes
// and refunds.
type racyLimiter struct {
	mu       sync.Mutex
	allow    bool // whether takes succeed
	takes    int
	refunds  int
	refundFn func() error
}

func (r *racyLimiter) AllowN(_ context.Context, _ string, n int) (Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == 0 {
		return Decision{Allowed: true, Limit: 10, Remaining: 10}, nil
	}
	if !r.allow {
		return Decision{Limit: 10, RetryAfter: time.Second, ResetAfter: time.Second}, nil
	}
	r.takes++
	return Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}, nil
}

// refundingLimiter is a racyLimiter that implements Refunder.
type refundingLimiter struct{ racyLimiter }

func (r *refundingLimiter) RefundN(context.Context, string, int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refunds++
	if r.refundFn != nil {
		return r.refundFn()
	}
	return nil
}

func TestCompositeGivesBackOnLostRace(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(5), clk)
	plain := &racyLimiter{allow: true} // no Refunder: consumed last
	racy := &racyLimiter{}             // denies the take
	c, err := All(plain, racy, b)
	require.NoError(t, err)
	ctx := context.Background()

	d, err := c.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, 10, d.Limit, "the denying limit is reported")
	p, err := b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, p.Remaining, "the bucket, taken first, was refunded")
	assert.Equal(t, 1, plain.takes, "a limiter without Refunder keeps what it took")

	// In the order given, plain would have been asked first: the Refunder
	// goes first, so when the last limiter is the one that denies, a
	// non-Refunder before it is the only possible loss.
	plain2 := &racyLimiter{}
	c, err = All(plain2, b)
	require.NoError(t, err)
	d, err = c.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	p, err = b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, p.Remaining)
}

func TestCompositeRefundErrorIsReported(t *testing.T) {
	failing := &refundingLimiter{racyLimiter{allow: true, refundFn: func() error { return errStoreDown }}}
	c, err := All(failing, &racyLimiter{})
	require.NoError(t, err)
	d, err := c.AllowN(context.Background(), "k", 1)
	require.ErrorIs(t, err, errStoreDown)
	assert.False(t, d.Allowed)
	assert.Equal(t, 1, failing.refunds)
}

func TestCompositeLimiterError(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(5), clk)
	calls := 0
	flaky := limiterFunc(func(_ context.Context, _ string, n int) (Decision, error) {
		calls++
		if n > 0 {
			return Decision{}, errStoreDown
		}
		return Decision{Allowed: true, Limit: 5, Remaining: 5}, nil
	})
	c, err := All(b, flaky)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.AllowN(ctx, "k", 1)
	require.ErrorIs(t, err, errStoreDown)
	p, err := b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, p.Remaining, "what was taken before the error is given back")

	down := limiterFunc(func(context.Context, string, int) (Decision, error) { return Decision{}, errStoreDown })
	c, err = All(b, down)
	require.NoError(t, err)
	_, err = c.Allow(ctx, "k")
	require.ErrorIs(t, err, errStoreDown)
}

// TestCompositeConcurrentExact: many goroutines on one key at a frozen
// clock. Exactly the smaller quota is allowed, and the larger limit ends up
// with exactly that many units taken: denials, including lost races, are
// given back.
func TestCompositeConcurrentExact(t *testing.T) {
	clk := newTBClock()
	loose := newTestBucket(t, PerMinute(40), clk)
	tight := newTestBucket(t, PerMinute(25), clk)
	c, err := All(loose, tight)
	require.NoError(t, err)
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
	)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				d, err := c.Allow(ctx, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 25, allowed)
	p, err := loose.AllowN(ctx, "hot", 0)
	require.NoError(t, err)
	assert.Equal(t, 15, p.Remaining)
}

func TestCompositeResetAndRefund(t *testing.T) {
	clk := newTBClock()
	a := newTestBucket(t, PerMinute(3), clk)
	b := newTestBucket(t, PerHour(5), clk)
	other := &racyLimiter{allow: true}
	c, err := All(a, b, other)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.AllowN(ctx, "k", 3)
	require.NoError(t, err)
	require.NoError(t, c.RefundN(ctx, "k", 1))
	d, err := c.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Remaining, "min(3-3+1, 5-3+1)")
	require.NoError(t, c.Reset(ctx, "k"))
	d, err = c.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining)

	failing := &refundingLimiter{racyLimiter{refundFn: func() error { return errStoreDown }}}
	c, err = All(failing)
	require.NoError(t, err)
	require.ErrorIs(t, c.RefundN(ctx, "k", 1), errStoreDown)

	bad := resetFunc(func(context.Context, string) error { return errStoreDown })
	c, err = All(bad)
	require.NoError(t, err)
	require.ErrorIs(t, c.Reset(ctx, "k"), errStoreDown)
	assert.True(t, errors.Is(c.Reset(ctx, "k"), errStoreDown))
}

// resetFunc is a Limiter that allows everything and fails to reset.
type resetFunc func(context.Context, string) error

func (f resetFunc) AllowN(context.Context, string, int) (Decision, error) {
	return Decision{Allowed: true, Limit: 1, Remaining: 1}, nil
}

func (f resetFunc) Reset(ctx context.Context, key string) error { return f(ctx, key) }

func TestCompositeManyLimiters(t *testing.T) {
	clk := newTBClock()
	var ls []Limiter
	for i := 1; i <= compositeInline+2; i++ {
		ls = append(ls, newTestBucket(t, PerMinute(i+1), clk))
	}
	c, err := All(ls...)
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		d, err := c.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := c.Allow(ctx, "k")
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 2, d.Limit)
	assert.Equal(t, 30*time.Second, d.RetryAfter)
}

func TestCompositeHotPathAllocations(t *testing.T) {
	clk := newTBClock()
	a := newTestBucket(t, PerSecond(1000), clk, WithBurst(1<<20))
	b := newTestBucket(t, PerSecond(3000), clk, WithBurst(1<<20))
	c, err := All(a, b)
	require.NoError(t, err)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Allow(ctx, "hot"); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}
