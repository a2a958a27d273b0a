package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestConformance runs the floodgatetest suite, unchanged, for every
// algorithm on both clients. The suite hands each limiter its own clock;
// WithClock sends that time with each decision. Durations are reported in
// whole microseconds, the resolution of the Redis state.
func TestConformance(t *testing.T) {
	addr := redistest.Shared(t)
	suites := []struct {
		alg    floodgatetest.Algorithm
		bursts bool
		new    func(redisstore.Scripter, floodgatetest.Config, ...redisstore.Option) (floodgatetest.Limiter, error)
	}{
		{floodgatetest.TokenBucket, true, func(s redisstore.Scripter, c floodgatetest.Config, opts ...redisstore.Option) (floodgatetest.Limiter, error) {
			return redisstore.NewTokenBucket(s, c.Rate, append(opts, redisstore.WithBurst(c.Burst))...)
		}},
		{floodgatetest.IntervalTokenBucket, true, func(s redisstore.Scripter, c floodgatetest.Config, opts ...redisstore.Option) (floodgatetest.Limiter, error) {
			return redisstore.NewTokenBucket(s, c.Rate, append(opts, redisstore.WithBurst(c.Burst), redisstore.WithIntervalRefill())...)
		}},
		{floodgatetest.SlidingLog, false, func(s redisstore.Scripter, c floodgatetest.Config, opts ...redisstore.Option) (floodgatetest.Limiter, error) {
			return redisstore.NewSlidingLog(s, c.Rate, opts...)
		}},
		{floodgatetest.SlidingCounter, false, func(s redisstore.Scripter, c floodgatetest.Config, opts ...redisstore.Option) (floodgatetest.Limiter, error) {
			return redisstore.NewSlidingCounter(s, c.Rate, opts...)
		}},
	}
	var seq atomic.Int64
	for _, c := range clients(t, addr) {
		for _, s := range suites {
			t.Run(c.name+"/"+s.alg.String(), func(t *testing.T) {
				p := prefix(t)
				floodgatetest.Run(t, floodgatetest.Suite{
					Algorithm:                s.alg,
					Bursts:                   s.bursts,
					Resolution:               time.Microsecond,
					RateChangeOnNextDecision: true,
					New: func(cfg floodgatetest.Config) (floodgatetest.Limiter, error) {
						// Each limiter its own prefix: a change of rate is
						// kept in Redis for every limiter of a prefix.
						return s.new(c.s, cfg, redisstore.WithClock(cfg.Clock.Now), patient,
							redisstore.WithPrefix(fmt.Sprintf("%s:%d", p, seq.Add(1))), redisstore.WithRateRefresh(time.Millisecond))
					},
				})
			})
		}
	}
}
