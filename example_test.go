package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"golang.org/x/time/rate"
)

// A sign-up service allows 3 sign-ups per minute for one client, straight
// from business code. The clock is fixed so that the output is stable; a
// service leaves WithClock out.
func ExampleNewTokenBucket() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	signups, err := floodgate.NewTokenBucket(floodgate.PerMinute(3),
		floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err) // invalid configuration is reported here, never later
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := signups.Allow(ctx, "client:203.0.113.7")
		if err != nil {
			panic(err)
		}
		if !d.Allowed {
			fmt.Printf("sign-up %d: denied, retry in %s\n", i, d.RetryAfter)
			continue
		}
		fmt.Printf("sign-up %d: allowed, %d left\n", i, d.Remaining)
	}
	now = now.Add(20 * time.Second) // one token back
	d, _ := signups.Allow(ctx, "client:203.0.113.7")
	fmt.Println("20s later:", d.Allowed)
	// Output:
	// sign-up 1: allowed, 2 left
	// sign-up 2: allowed, 1 left
	// sign-up 3: allowed, 0 left
	// sign-up 4: denied, retry in 20s
	// 20s later: true
}

// WithBurst separates the long-run rate from how many events may come at
// once: 1 per second on average, but up to 5 after a quiet spell.
func ExampleWithBurst() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	api, err := floodgate.NewTokenBucket(floodgate.PerSecond(1),
		floodgate.WithBurst(5),
		floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := api.AllowN(ctx, "user:42", 5)
	fmt.Println("5 at once:", d.Allowed, "remaining", d.Remaining, "full again in", d.ResetAfter)
	d, _ = api.Allow(ctx, "user:42")
	fmt.Println("a 6th:", d.Allowed, "retry in", d.RetryAfter)
	_, err = api.AllowN(ctx, "user:42", 6)
	fmt.Println("6 at once:", errors.Is(err, floodgate.ErrCostExceedsLimit))
	// Output:
	// 5 at once: true remaining 0 full again in 5s
	// a 6th: false retry in 1s
	// 6 at once: true
}

// All combines limits on one key: 2 per minute and 3 per hour. A request
// denied by either consumes from neither.
func ExampleAll() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := floodgate.WithClock(func() time.Time { return now })
	perMinute, _ := floodgate.NewTokenBucket(floodgate.PerMinute(2), clock)
	perHour, _ := floodgate.NewTokenBucket(floodgate.PerHour(3), clock)
	rewards, err := floodgate.All(perMinute, perHour)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, at := range []time.Duration{0, 0, 0, time.Minute, 2 * time.Minute} {
		now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).Add(at)
		d, _ := rewards.Allow(ctx, "user:42")
		fmt.Printf("+%s: allowed=%v limit=%d retry=%s\n", at, d.Allowed, d.Limit, d.RetryAfter)
	}
	// Output:
	// +0s: allowed=true limit=2 retry=0s
	// +0s: allowed=true limit=2 retry=0s
	// +0s: allowed=false limit=2 retry=30s
	// +1m0s: allowed=true limit=3 retry=0s
	// +2m0s: allowed=false limit=3 retry=18m0s
}

// WaitN blocks until any Limiter allows the request, and gives up at once
// when the context's deadline comes too soon.
func ExampleWaitN() {
	exports, err := floodgate.NewTokenBucket(floodgate.PerHour(1))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	fmt.Println("first:", floodgate.WaitN(ctx, exports, "tenant:7", 1))
	err = floodgate.WaitN(ctx, exports, "tenant:7", 1) // the next token is an hour away
	fmt.Println("second gives up at once:", errors.Is(err, floodgate.ErrWouldExceedDeadline))
	fmt.Println("and is a deadline error:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// first: <nil>
	// second gives up at once: true
	// and is a deadline error: true
}

// FromRateLimiter turns a golang.org/x/time/rate Limiter into a Limiter
// shared by every key: a server-wide cap, here combined with a per-client
// limit.
func ExampleFromRateLimiter() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := floodgate.WithClock(func() time.Time { return now })
	server, err := floodgate.FromRateLimiter(rate.NewLimiter(10, 3), clock)
	if err != nil {
		panic(err)
	}
	perClient, _ := floodgate.NewTokenBucket(floodgate.PerMinute(2), clock)
	both, _ := floodgate.All(server, perClient)
	ctx := context.Background()
	for _, client := range []string{"a", "a", "a", "b", "c"} {
		d, _ := both.Allow(ctx, client)
		// x/time/rate computes in float64: its waits can be a
		// nanosecond off a round number.
		fmt.Printf("%s: %v (retry in %s)\n", client, d.Allowed, d.RetryAfter.Round(time.Millisecond))
	}
	// Output:
	// a: true (retry in 0s)
	// a: true (retry in 0s)
	// a: false (retry in 30s)
	// b: true (retry in 0s)
	// c: false (retry in 100ms)
}

// WithIntervalRefill gives the whole quota back at once per period, like
// "10 per 10 minutes, reset every 10 minutes".
func ExampleWithIntervalRefill() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := start
	probe, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 10, Period: 10 * time.Minute},
		floodgate.WithIntervalRefill(),
		floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := probe.AllowN(ctx, "198.51.100.1", 10)
	fmt.Println("10 at once:", d.Allowed)
	now = start.Add(9 * time.Minute)
	d, _ = probe.Allow(ctx, "198.51.100.1")
	fmt.Println("9m later:", d.Allowed, "retry in", d.RetryAfter)
	now = start.Add(10 * time.Minute)
	d, _ = probe.AllowN(ctx, "198.51.100.1", 10)
	fmt.Println("10m later, 10 again:", d.Allowed)
	// Output:
	// 10 at once: true
	// 9m later: false retry in 1m0s
	// 10m later, 10 again: true
}
