package redisstore_test

import (
	"context"
	"errors"
	"strings"
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

func (f *flakyServer) EvalSha(_ context.Context, _ string, keys, _ []string) ([]int64, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errNoServer
	}
	if !strings.Contains(keys[0], "{") {
		return []int64{0}, nil // the rate record: none
	}
	// A token bucket reply: allowed, full again in 1 s.
	return []int64{1, 1000000, 0, 0, 0}, nil
}

func (f *flakyServer) Eval(ctx context.Context, _ string, keys, args []string) ([]int64, error) {
	return f.EvalSha(ctx, "", keys, args)
}

// TestFallbackProbesOncePerInterval: after a failure the fallback answers
// without touching the server until the probe interval has passed.
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
}

// hangingServer answers nothing until the caller's context ends, as a
// decision in flight when the client hangs up; it counts the calls.
type hangingServer struct {
	calls   atomic.Int64
	started chan struct{}
}

func (h *hangingServer) EvalSha(ctx context.Context, _ string, _, _ []string) ([]int64, error) {
	h.calls.Add(1)
	h.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (h *hangingServer) Eval(ctx context.Context, _ string, keys, args []string) ([]int64, error) {
	return h.EvalSha(ctx, "", keys, args)
}

// TestCallerGoneIsNotAnOutage: a caller whose context is cancelled (the
// client hung up) gets an error wrapping context.Canceled, not ErrRedis,
// whether it hung up before the round trip (then nothing is sent) or
// during it; and neither case sends later decisions to the fallback,
// which would let a client's own hang-ups switch the limit to a local one.
func TestCallerGoneIsNotAnOutage(t *testing.T) {
	srv := &hangingServer{started: make(chan struct{}, 1)}
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
	check := func(what string, d floodgate.Decision, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) || errors.Is(err, redisstore.ErrRedis) || d.Allowed {
			t.Fatalf("%s: %+v, %v; want a denial with an error wrapping context.Canceled and not ErrRedis", what, d, err)
		}
	}

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := l.Allow(gone, "k")
	check("cancelled before the call", d, err)
	if srv.calls.Load() != 0 {
		t.Fatalf("a cancelled caller's decision reached the server (%d calls)", srv.calls.Load())
	}

	for i := 1; i <= 3; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-srv.started; cancel() }()
		d, err := l.Allow(ctx, "k")
		check("cancelled during the round trip", d, err)
		// Still on Redis: each decision reached the server, none the
		// fallback.
		if srv.calls.Load() != int64(i) || fb.calls.Load() != 0 {
			t.Fatalf("after %d hang-ups: server %d calls, fallback %d; want %d and 0", i, srv.calls.Load(), fb.calls.Load(), i)
		}
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
