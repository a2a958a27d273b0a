package redisstore_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestErrorKeepsCause: a decision against a port nothing listens on fails
// with ErrRedis wrapping "connection refused" (syscall.ECONNREFUSED), not
// a context deadline: an operator reading the log must see that Redis is
// down, not slow. go-redis with DialerRetries: 1, as goredisstore
// recommends: its default retries a refused dial 5 times, 100 ms apart,
// past the decision's timeout. rueidis through Lazy, with its defaults.
func TestErrorKeepsCause(t *testing.T) {
	verifyNoLeaks(t)
	addr := closedPort(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	lazy := rueidisstore.Lazy(rueidis.ClientOption{InitAddress: []string{addr}})
	t.Cleanup(lazy.Close)
	for _, c := range []client{{"go-redis", goredisstore.New(rdb)}, {"rueidis (Lazy)", lazy}} {
		t.Run(c.name, func(t *testing.T) {
			l, err := redisstore.NewTokenBucket(c.s, floodgate.PerHour(10), redisstore.WithPrefix(prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(context.Background(), "k")
			if d.Allowed || !errors.Is(err, redisstore.ErrRedis) || !errors.Is(err, syscall.ECONNREFUSED) ||
				errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Allow against a closed port: %+v, %v; want a denial wrapping ErrRedis and ECONNREFUSED, not a deadline", d, err)
			}
		})
	}
}

// TestLazyStartsWhileRedisDown: rueidis.NewClient fails while Redis is
// down, so a service building its limiter from it cannot start; with
// rueidisstore.Lazy and WithFallback it starts, the fallback answers
// during the outage, and decisions move to Redis once it is up.
func TestLazyStartsWhileRedisDown(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	srv.Stop()
	if c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}}); err == nil {
		c.Close()
		t.Fatal("rueidis.NewClient succeeded with Redis down; the pattern below would not be needed")
	}

	lazy := rueidisstore.Lazy(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	t.Cleanup(lazy.Close)
	mem, err := floodgate.NewTokenBucket(floodgate.PerHour(100))
	if err != nil {
		t.Fatal(err)
	}
	fb := &countingLimiter{Limiter: mem}
	l, err := redisstore.NewTokenBucket(lazy, floodgate.PerHour(100), redisstore.WithPrefix(prefix(t)),
		redisstore.WithFallback(fb), redisstore.WithProbeInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("decision %d with Redis down: %+v, %v; want the fallback's allowance", i, d, err)
		}
	}
	if fb.calls.Load() != 5 {
		t.Fatalf("fallback answered %d of 5 decisions while Redis was down", fb.calls.Load())
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := fb.calls.Load()
		d, err := l.Allow(ctx, "k")
		if err == nil && fb.calls.Load() == before {
			// Redis's own bucket: this is its first charge.
			if d.Remaining != 99 {
				t.Fatalf("first decision on Redis: %+v, want Remaining 99", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions did not move to Redis within 10 s: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // waits for the probe interval, not for a refill
	}
}
