package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// scriptedServer answers every script call on a client's key with reply,
// or with the error of the caller's context when it is done; a read of
// the rate record (a key without a hash tag) finds none.
type scriptedServer struct {
	reply func() ([]int64, error)
}

func (s *scriptedServer) EvalSha(ctx context.Context, _ string, keys, _ []string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !strings.Contains(keys[0], "{") {
		return []int64{0}, nil
	}
	return s.reply()
}

func (s *scriptedServer) Eval(ctx context.Context, _ string, keys, args []string) ([]int64, error) {
	return s.EvalSha(ctx, "", keys, args)
}

// netTimeout is a network error that timed out, as a client reports a
// read deadline passing.
type netTimeout struct{}

func (netTimeout) Error() string   { return "read tcp: i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

// Token bucket replies: allowed, and denied with a RetryAfter of 30 s.
var (
	replyAllowed = []int64{1, 1000000, 0, 0, 0}
	replyDenied  = []int64{0, 60000000, 0, 30000000, 0}
)

// TestStatsCountsDenyCacheAndFallback walks one limiter through a flood the
// deny cache answers, then an outage the fallback answers, and back.
func TestStatsCountsDenyCacheAndFallback(t *testing.T) {
	srv := &scriptedServer{reply: func() ([]int64, error) { return replyDenied, nil }}
	mem, err := floodgate.NewTokenBucket(floodgate.PerSecond(1000))
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t0}
	l, err := redisstore.NewTokenBucket(srv, floodgate.PerMinute(2), redisstore.WithClock(clock.Now),
		redisstore.WithDenyCache(10), redisstore.WithFallback(mem), redisstore.WithProbeInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := func(step string, w redisstore.Stats) {
		t.Helper()
		if got := l.Stats(); got != w {
			t.Fatalf("%s: Stats() = %+v, want %+v", step, got, w)
		}
	}
	want("fresh", redisstore.Stats{})

	for i := 0; i < 4; i++ {
		if d, err := l.Allow(ctx, "flooder"); err != nil || d.Allowed {
			t.Fatalf("flood %d: %+v, %v; want a denial", i, d, err)
		}
	}
	want("after a flood of 4", redisstore.Stats{DenyCacheHits: 3})

	srv.reply = func() ([]int64, error) { return nil, context.DeadlineExceeded }
	for i := 0; i < 3; i++ {
		if d, err := l.Allow(ctx, "other"); err != nil || !d.Allowed {
			t.Fatalf("outage %d: %+v, %v; want the fallback's allowance", i, d, err)
		}
	}
	// One round trip timed out; the fallback answered it and the two
	// decisions after it, which did not try Redis.
	want("during an outage", redisstore.Stats{FallbackActive: true, FallbackDecisions: 3, DenyCacheHits: 3, TimeoutErrors: 1})

	// Back to Redis: the deny cache still answers the flooder, and the
	// counts only grow.
	srv.reply = func() ([]int64, error) { return replyAllowed, nil }
	l2, err := redisstore.NewTokenBucket(srv, floodgate.PerMinute(2), redisstore.WithFallback(mem))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := l2.Stats(); got != (redisstore.Stats{}) {
		t.Fatalf("healthy limiter with a fallback: Stats() = %+v, want zeros", got)
	}
}

// TestStatsCountsErrorsByKind: each failed round trip of a decision, a
// refund or a reset is counted once, under its kind.
func TestStatsCountsErrorsByKind(t *testing.T) {
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			srv := &scriptedServer{}
			l := a.mustNew(t, srv, floodgate.PerMinute(2))
			ctx := context.Background()
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			steps := []struct {
				name  string
				reply error
				want  error // what the error wraps
				call  func() error
			}{
				{"limiter timeout", context.DeadlineExceeded, redisstore.ErrRedis, func() error { _, err := l.AllowN(ctx, "k", 1); return err }},
				{"network timeout", netTimeout{}, redisstore.ErrRedis, func() error { _, err := l.AllowN(ctx, "k", 1); return err }},
				// A hang-up is the caller's, not Redis's: context.Canceled,
				// never ErrRedis, yet counted under its own kind.
				{"caller hung up", nil, context.Canceled, func() error { _, err := l.AllowN(canceled, "k", 1); return err }},
				{"refused", errNoServer, redisstore.ErrRedis, func() error { _, err := l.AllowN(ctx, "k", 1); return err }},
				{"reset refused", errNoServer, redisstore.ErrRedis, func() error { return l.Reset(ctx, "k") }},
				{"refund refused", errNoServer, redisstore.ErrRedis, func() error { return l.(floodgate.Refunder).RefundN(ctx, "k", 1) }},
			}
			for _, s := range steps {
				srv.reply = func() ([]int64, error) { return nil, s.reply }
				err := s.call()
				if !errors.Is(err, s.want) {
					t.Fatalf("%s: err = %v, want %v", s.name, err, s.want)
				}
				if s.want != redisstore.ErrRedis && errors.Is(err, redisstore.ErrRedis) {
					t.Fatalf("%s: err = %v wraps ErrRedis", s.name, err)
				}
			}
			st := l.(interface{ Stats() redisstore.Stats }).Stats()
			want := redisstore.Stats{TimeoutErrors: 2, CanceledErrors: 1, OtherErrors: 3}
			if st != want {
				t.Fatalf("Stats() = %+v, want %+v", st, want)
			}
		})
	}
}
