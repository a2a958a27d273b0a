package floodgate_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// The in-memory limiters run the same conformance suite as every other
// store.

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
