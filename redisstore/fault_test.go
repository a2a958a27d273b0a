package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// countingLimiter counts the decisions a fallback answers.
type countingLimiter struct {
	floodgate.Limiter
	calls atomic.Int64
}

func (c *countingLimiter) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	c.calls.Add(1)
	return c.Limiter.AllowN(ctx, key, n)
}

// TestServerRestart stops the server under traffic and starts it again on
// the same port (empty: persistence is off, so the scripts are gone too).
// Without a fallback every decision during the outage is an error wrapping
// ErrRedis and never an allowance; with one, the fallback answers without
// error. Either way nothing panics, decisions come from Redis again soon
// after it returns, and once the clients are closed no goroutine is left.
func TestServerRestart(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)

	for _, withFallback := range []bool{false, true} {
		for _, newClient := range []func(testing.TB, string) client{goRedis, rueidisClient} {
			// A fresh client per subtest: the previous one restarted the
			// server, which a client notices only on its next call.
			c := newClient(t, srv.Addr)
			name := c.name + "/no-fallback"
			if withFallback {
				name = c.name + "/fallback"
			}
			t.Run(name, func(t *testing.T) {
				mem, err := floodgate.NewTokenBucket(floodgate.PerSecond(1000))
				if err != nil {
					t.Fatal(err)
				}
				fb := &countingLimiter{Limiter: mem}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithTimeout(300 * time.Millisecond)}
				if withFallback {
					opts = append(opts, redisstore.WithFallback(fb), redisstore.WithProbeInterval(50*time.Millisecond))
				}
				l, err := redisstore.NewTokenBucket(c.s, floodgate.PerSecond(1000), opts...)
				if err != nil {
					t.Fatal(err)
				}
				restartUnderTraffic(t, srv, l, fb, withFallback)
			})
		}
	}
}

func restartUnderTraffic(t *testing.T, srv *redistest.Server, l floodgate.Limiter, fb *countingLimiter, withFallback bool) {
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := l.AllowN(ctx, "k", 1); err != nil {
			t.Fatalf("healthy server: %v", err)
		}
	}
	if fb.calls.Load() != 0 {
		t.Fatalf("the fallback answered %d decisions while Redis was up", fb.calls.Load())
	}

	srv.Stop()
	// Concurrent traffic during the outage, bounded in count.
	var wg sync.WaitGroup
	var bad atomic.Int64
	var firstBad atomic.Value
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				d, err := l.AllowN(ctx, "k", 1)
				ok := withFallback && err == nil && d.Allowed ||
					!withFallback && errors.Is(err, redisstore.ErrRedis) && !d.Allowed
				if !ok {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, [2]any{d, err})
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d decisions broke the policy during the outage, first: %v", bad.Load(), firstBad.Load())
	}
	if withFallback && fb.calls.Load() != 80 {
		t.Errorf("fallback answered %d of 80 decisions during the outage", fb.calls.Load())
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Back on Redis within a bounded time: a decision without error that
	// the fallback did not answer.
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := fb.calls.Load()
		_, err := l.AllowN(ctx, "k", 1)
		if err == nil && fb.calls.Load() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions did not return to Redis within 10 s: last error %v", err)
		}
		time.Sleep(10 * time.Millisecond) // wait for the client to reconnect, not for a refill
	}
}
