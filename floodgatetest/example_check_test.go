package floodgatetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// forgetful is a token bucket that forgets its refunds.
type forgetful struct{ *floodgate.TokenBucket }

func (forgetful) RefundN(context.Context, string, int) error { return nil }

// The concurrency checker on a limiter of your own: say which algorithm
// it promises, at what rate, and how to build it on the checker's clock.
// In a test, floodgatetest.Check(t, c) runs it for its budget and fails
// the test with a shrunk repro; Find runs the programs of the seeds given
// and returns what it found.
func ExampleChecker_Find() {
	c := floodgatetest.Checker{
		Name:      "token bucket",
		Algorithm: floodgatetest.TokenBucket,
		Rate:      floodgate.PerSecond(5),
		Without:   floodgatetest.RateChanges,
		New: func(cfg floodgatetest.CheckConfig) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(cfg.Rate, floodgate.WithClock(cfg.Now))
		},
	}
	f, err := c.Find(1, 2, 3)
	fmt.Println("TokenBucket:", f, err)

	c.New = func(cfg floodgatetest.CheckConfig) (floodgate.Limiter, error) {
		tb, err := floodgate.NewTokenBucket(cfg.Rate, floodgate.WithClock(cfg.Now))
		return forgetful{tb}, err
	}
	f, err = c.Find(1, 2, 3)
	fmt.Println("forgetful:", f.Kind, err)
	// Output:
	// TokenBucket: <nil> <nil>
	// forgetful: no order of the calls fits the sequential model (not linearizable) <nil>
}

// TestCheckTokenBucket runs the concurrency checker on floodgate's
// token bucket, as the test of a limiter of your own would.
func TestCheckTokenBucket(t *testing.T) {
	floodgatetest.Check(t, floodgatetest.Checker{
		Name:      "token bucket",
		Algorithm: floodgatetest.TokenBucket, // the semantics it promises
		Rate:      floodgate.Rate{Limit: 5, Period: time.Second},
		Without:   floodgatetest.RateChanges, // the root package's TestCheckLimiters checks them
		New: func(c floodgatetest.CheckConfig) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(c.Rate, floodgate.WithClock(c.Now))
		},
	})
}
