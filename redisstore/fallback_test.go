package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// flakyServer fails while down is set and counts the calls it gets.
type flakyServer struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (f *flakyServer) EvalSha(context.Context, string, []string, []string) ([]int64, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errNoServer
	}
	// A token bucket reply: allowed, full again in 1 s.
	return []int64{1, 1000000, 0, 0, 0}, nil
}

func (f *flakyServer) Eval(ctx context.Context, _ string, keys, args []string) ([]int64, error) {
	return f.EvalSha(ctx, "", keys, args)
}

// TestFallbackProbesOncePerInterval: after a failure the fallback answers
// without touching the server until the probe interval has passed; the
// caller's own cancellation is an error, not a fallback answer.
func TestFallbackProbesOncePerInterval(t *testing.T) {
	srv := &flakyServer{}
	srv.down.Store(true)
	mem, err := floodgate.NewTokenBucket(floodgate.PerSecond(1000))
	if err != nil {
		t.Fatal(err)
	}
	fb := &countingLimiter{Limiter: mem}
	l, err := redisstore.NewTokenBucket(srv, floodgate.PerSecond(1000),
		redisstore.WithFallback(fb), redisstore.WithProbeInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("decision %d with the server down: %+v, %v; want the fallback's allowance", i, d, err)
		}
	}
	if srv.calls.Load() != 1 || fb.calls.Load() != 100 {
		t.Fatalf("server called %d times, fallback %d; want 1 and 100", srv.calls.Load(), fb.calls.Load())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	l2, _ := redisstore.NewTokenBucket(srv, floodgate.PerSecond(1000), redisstore.WithFallback(fb))
	if _, err := l2.Allow(cctx, "k"); !errors.Is(err, redisstore.ErrRedis) {
		t.Fatalf("canceled caller: err = %v, want ErrRedis, not a fallback answer", err)
	}
}

// TestFallbackReturnsToRedis: once a probe succeeds, decisions are Redis's
// again.
func TestFallbackReturnsToRedis(t *testing.T) {
	srv := &flakyServer{}
	srv.down.Store(true)
	mem, _ := floodgate.NewTokenBucket(floodgate.PerSecond(1000))
	fb := &countingLimiter{Limiter: mem}
	l, err := redisstore.NewTokenBucket(srv, floodgate.PerSecond(1000),
		redisstore.WithFallback(fb), redisstore.WithProbeInterval(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = l.Allow(ctx, "k") // fails over
	srv.down.Store(false)
	time.Sleep(time.Millisecond) // let the 1 ns probe interval pass: no refill is waited for
	before := fb.calls.Load()
	for i := 0; i < 10; i++ {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if fb.calls.Load() != before {
		t.Fatalf("fallback answered %d decisions after the server came back", fb.calls.Load()-before)
	}
}
