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

// TestLeaseConformance runs the floodgatetest suite, unchanged, against
// the leased sliding counter on both clients, held to the rules every
// decision obeys (Lossy: a unit leased and not used, when the clock jumps
// past its window, is lost as if it had been used, so the model's
// decisions are not the leased counter's). A change of rate drops the
// leases held, whose units count as used, so the suite runs without
// SetRate, and TestLeaseRateChange checks what holds. MaxShare 1 lets a lease take a key's whole capacity, so that
// the suite's small limits lease too; its frozen clock makes keys hot.
//
// The leased token bucket passes every check of the suite but
// RandomTraffic, by design: there the clock jumps past the time of units
// leased and not yet used, and each such unit is lost as if it had been
// used (LeaseStats.StrandedUnits), so the bucket holds less than the
// model's. TestLeaseNeverOverExactLimiter checks what does hold for it:
// never more than the exact limiter.
func TestLeaseConformance(t *testing.T) {
	addr := redistest.Shared(t)
	suites := []struct {
		alg    floodgatetest.Algorithm
		bursts bool
		new    func(redisstore.Scripter, floodgatetest.Config, ...redisstore.Option) (floodgatetest.Limiter, error)
	}{
		{floodgatetest.SlidingCounter, false, func(s redisstore.Scripter, c floodgatetest.Config, opts ...redisstore.Option) (floodgatetest.Limiter, error) {
			return redisstore.NewSlidingCounter(s, c.Rate, opts...)
		}},
	}
	var seq atomic.Int64
	for _, share := range []int{1, 0} {
		for _, c := range leaseClients(t, addr) {
			for _, s := range suites {
				name := c.name + "/" + s.alg.String()
				if share == 0 {
					name += "/default-share"
				}
				t.Run(name, func(t *testing.T) {
					p := prefix(t)
					floodgatetest.Run(t, floodgatetest.Suite{
						Algorithm:  s.alg,
						Bursts:     s.bursts,
						Resolution: time.Microsecond,
						Lossy:      true,
						New: func(cfg floodgatetest.Config) (floodgatetest.Limiter, error) {
							l, err := s.new(c.s, cfg, redisstore.WithClock(cfg.Clock.Now), patient,
								redisstore.WithPrefix(fmt.Sprintf("%s:%d", p, seq.Add(1))), redisstore.WithLease(redisstore.Lease{MaxShare: share}))
							// Without SetRate: a change drops the leases, whose
							// units count as used (TestLeaseRateChange).
							return struct{ floodgatetest.Limiter }{l}, err
						},
					})
				})
			}
		}
	}
}
