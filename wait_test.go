package floodgate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timerRequest is one timer WaitN asked the fake waiter for.
type timerRequest struct {
	d       time.Duration
	fire    chan time.Time
	stopped chan struct{}
}

// fakeWaiter returns a waiter on clk whose timers are handed to the test
// through the returned channel instead of firing by themselves.
func fakeWaiter(clk *tbClock) (waiter, <-chan timerRequest) {
	reqs := make(chan timerRequest)
	w := waiter{
		now: clk.Now,
		after: func(d time.Duration) (<-chan time.Time, func() bool) {
			r := timerRequest{d: d, fire: make(chan time.Time, 1), stopped: make(chan struct{})}
			reqs <- r
			return r.fire, func() bool { close(r.stopped); return true }
		},
	}
	return w, reqs
}

// noTimerWaiter fails the test if WaitN asks for a timer; the timer then
// fires at once after advancing clk by d, so that a faulty WaitN fails the
// test instead of hanging it.
func noTimerWaiter(t *testing.T, clk *tbClock) waiter {
	return waiter{
		now: clk.Now,
		after: func(d time.Duration) (<-chan time.Time, func() bool) {
			t.Errorf("WaitN waited %s; it should not have waited", d)
			clk.Advance(d)
			c := make(chan time.Time, 1)
			c <- clk.Now()
			return c, func() bool { return false }
		},
	}
}

// waitAsync runs w.waitN in a goroutine and returns its result channel.
func waitAsync(ctx context.Context, w waiter, l Limiter, key string, n int) <-chan error {
	done := make(chan error, 1)
	go func() { done <- w.waitN(ctx, l, key, n) }()
	return done
}

func TestWaitNReturnsAtOnceWhenAllowed(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(2), clk)
	w := noTimerWaiter(t, clk)
	ctx := context.Background()
	require.NoError(t, w.waitN(ctx, b, "k", 2))
	require.NoError(t, w.waitN(ctx, b, "k", 0), "n == 0 never waits")
	d, err := b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, d.Remaining, "WaitN consumed the units")
}

func TestWaitNWaitsRetryAfterAndRetries(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(3), clk) // a token every 20s
	ctx := context.Background()
	_, err := b.AllowN(ctx, "k", 3)
	require.NoError(t, err)
	clk.Advance(5 * time.Second)

	w, reqs := fakeWaiter(clk)
	done := waitAsync(ctx, w, b, "k", 2)
	r := <-reqs
	assert.Equal(t, 35*time.Second, r.d, "the first wait is RetryAfter for n=2")
	// Fire early, as a coarse timer might: WaitN asks again and waits the rest.
	clk.Advance(30 * time.Second)
	r.fire <- clk.Now()
	r = <-reqs
	assert.Equal(t, 5*time.Second, r.d)
	clk.Advance(5 * time.Second)
	r.fire <- clk.Now()
	require.NoError(t, <-done)

	d, err := b.AllowN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, d.Remaining, "the two tokens were taken")
}

func TestWaitNFailsEarlyPastDeadline(t *testing.T) {
	clk := newTBClock()
	clk.Set(time.Now()) // the context deadline is on the real clock
	b := newTestBucket(t, PerMinute(1), clk)
	w := noTimerWaiter(t, clk)
	_, err := b.Allow(context.Background(), "k")
	require.NoError(t, err)

	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(59*time.Second))
	defer cancel()
	err = w.waitN(ctx, b, "k", 1)
	require.ErrorIs(t, err, ErrWouldExceedDeadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NoError(t, ctx.Err(), "it failed at once, not at the deadline")

	// A deadline just after the refill is enough.
	ctx2, cancel2 := context.WithDeadline(context.Background(), clk.Now().Add(61*time.Second))
	defer cancel2()
	w2, reqs := fakeWaiter(clk)
	done := waitAsync(ctx2, w2, b, "k", 1)
	r := <-reqs
	assert.Equal(t, time.Minute, r.d)
	clk.Advance(time.Minute)
	r.fire <- clk.Now()
	require.NoError(t, <-done)
}

func TestWaitNCancelWhileWaiting(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerHour(1), clk)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := b.Allow(ctx, "k")
	require.NoError(t, err)
	w, reqs := fakeWaiter(clk)
	done := waitAsync(ctx, w, b, "k", 1)
	r := <-reqs
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	<-r.stopped // the timer was stopped
}

func TestWaitNErrors(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(2), clk)
	w := noTimerWaiter(t, clk)

	err := w.waitN(context.Background(), b, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit, "a cost that can never fit fails at once")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, w.waitN(ctx, b, "k", 1), context.Canceled)
	d, err := b.AllowN(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Remaining, "a done context consumes nothing")

	failing := limiterFunc(func(context.Context, string, int) (Decision, error) {
		return Decision{}, errStoreDown
	})
	require.ErrorIs(t, w.waitN(context.Background(), failing, "k", 1), errStoreDown)
}

func TestWaitNFloorsZeroRetryAfter(t *testing.T) {
	clk := newTBClock()
	calls := 0
	l := limiterFunc(func(context.Context, string, int) (Decision, error) {
		calls++
		return Decision{Allowed: calls > 1, Limit: 1}, nil
	})
	w, reqs := fakeWaiter(clk)
	done := waitAsync(context.Background(), w, l, "k", 1)
	r := <-reqs
	assert.Equal(t, minWait, r.d)
	r.fire <- clk.Now()
	require.NoError(t, <-done)
	assert.Equal(t, 2, calls)
}

// TestTokenBucketWaitMethods exercises the exported entry points on the
// system waiter without sleeping: one allowed, one that fails early.
func TestTokenBucketWaitMethods(t *testing.T) {
	b, err := NewTokenBucket(PerHour(1))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, b.Wait(ctx, "k"))
	err = b.WaitN(ctx, "k", 1)
	require.ErrorIs(t, err, ErrWouldExceedDeadline)
	require.ErrorIs(t, Wait(ctx, b, "k"), ErrWouldExceedDeadline)
	require.ErrorIs(t, WaitN(ctx, b, "k", 2), ErrCostExceedsLimit)
}

// limiterFunc adapts a function to Limiter for tests.
type limiterFunc func(ctx context.Context, key string, n int) (Decision, error)

func (f limiterFunc) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return f(ctx, key, n)
}

var errStoreDown = errors.New("test: store down")
