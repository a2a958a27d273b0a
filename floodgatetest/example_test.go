package floodgatetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// A Clock drives a limiter through time without sleeping.
func ExampleClock() {
	clock := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(2), floodgate.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, _ := lim.Allow(ctx, "client")
		fmt.Println(d.Allowed, d.RetryAfter)
	}
	clock.Advance(500 * time.Millisecond)
	d, _ := lim.Allow(ctx, "client")
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// true 0s
	// true 0s
	// false 500ms
	// true 0s
}
