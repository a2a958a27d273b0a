package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestCrossInstanceExactness plays several application instances: each has
// its own client (two go-redis, two rueidis) and its own limiter, all on
// one prefix, with many goroutines each hammering one key on the server's
// real clock. Exactly the quota must be allowed. The rate refills one unit
// per 36 s, far longer than the test runs, so no refill can blur the
// count.
func TestCrossInstanceExactness(t *testing.T) {
	addr := redistest.Shared(t)
	const (
		instances  = 4
		goroutines = 16
		attempts   = 20 // per goroutine: 1280 attempts in all
	)
	rate := floodgate.Rate{Limit: 100, Period: time.Hour}
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			p := prefix(t)
			lims := make([]limiter, instances)
			for i := range lims {
				c := goRedis(t, addr)
				if i%2 == 1 {
					c = rueidisClient(t, addr)
				}
				// A generous timeout: a decision that timed out may still
				// have run, which would blur the count this test is about.
				lims[i] = a.mustNew(t, c.s, rate, redisstore.WithPrefix(p), redisstore.WithTimeout(10*time.Second))
			}
			var allowed, denied, failed atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, l := range lims {
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for i := 0; i < attempts; i++ {
							d, err := l.AllowN(context.Background(), "hot", 1)
							switch {
							case err != nil:
								failed.Add(1)
								firstErr.CompareAndSwap(nil, err)
							case d.Allowed:
								allowed.Add(1)
							default:
								denied.Add(1)
							}
						}
					}()
				}
			}
			close(start)
			wg.Wait()
			if failed.Load() != 0 || allowed.Load() != int64(rate.Limit) {
				t.Fatalf("allowed %d, denied %d, failed %d (first: %v) of %d; want exactly %d allowed and no failure",
					allowed.Load(), denied.Load(), failed.Load(), firstErr.Load(), instances*goroutines*attempts, rate.Limit)
			}
		})
	}
}
