package metricstest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// T0 is the start of the tests' clocks.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ErrDown is the error of Failing and DownServer.
var ErrDown = errors.New("store down")

// NewBucket returns a token bucket on clk.
func NewBucket(t testing.TB, r floodgate.Rate, clk *floodgatetest.Clock, opts ...floodgate.Option) *floodgate.TokenBucket {
	t.Helper()
	b, err := floodgate.NewTokenBucket(r, append(opts, floodgate.WithClock(clk.Now))...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Failing is a limiter whose store is down.
type Failing struct{}

// AllowN implements floodgate.Limiter: it fails with ErrDown.
func (Failing) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{}, ErrDown
}

// DownServer is a Redis server, as redisstore's Server, that never
// answers.
type DownServer struct{}

// EvalSha fails with ErrDown.
func (DownServer) EvalSha(context.Context, string, []string, []string) ([]int64, error) {
	return nil, ErrDown
}

// Eval fails with ErrDown.
func (DownServer) Eval(context.Context, string, []string, []string) ([]int64, error) {
	return nil, ErrDown
}

// Bare is a limiter with no optional interface.
type Bare struct{ floodgate.Limiter }

// RefundOnly implements floodgate.Refunder but not floodgate.Resetter.
type RefundOnly struct{ *floodgate.TokenBucket }

// Reset is not floodgate.Resetter's: the type must not pass for one.
func (RefundOnly) Reset() {}

// ResetOnly implements floodgate.Resetter but not floodgate.Refunder.
type ResetOnly struct{ Bare }

// Reset implements floodgate.Resetter.
func (ResetOnly) Reset(context.Context, string) error { return nil }

// Second returns err, for tables of constructor errors.
func Second[T any](_ T, err error) error { return err }

// SteppingClock returns a clock that reads clk and moves it by step on
// every second reading, so that each timed decision, which reads the
// clock twice, takes step.
func SteppingClock(clk *floodgatetest.Clock, step time.Duration) func() time.Time {
	var mu sync.Mutex
	reads := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if reads%2 == 0 {
			return clk.Advance(step)
		}
		return clk.Now()
	}
}

// KeepsInterfaces checks that the limiter an adapter's Limiter returns
// is a Refunder, a Resetter and reports a Rate exactly as the limiter it
// wraps, for each combination of them. register is the adapter's Limiter.
func KeepsInterfaces(t *testing.T, register func(name string, l floodgate.Limiter) (floodgate.Limiter, error)) {
	t.Helper()
	tb := NewBucket(t, floodgate.PerMinute(10), floodgatetest.NewClock(T0))
	for i, tt := range []struct {
		name            string
		l               floodgate.Limiter
		refunds, resets bool
		rate            floodgate.Rate
	}{
		{"token bucket", tb, true, true, floodgate.PerMinute(10)},
		{"bare", Bare{tb}, false, false, floodgate.Rate{}},
		{"refund only", RefundOnly{tb}, true, false, floodgate.PerMinute(10)},
		{"reset only", ResetOnly{Bare{tb}}, false, true, floodgate.Rate{}},
	} {
		l, err := register("l"+strconv.Itoa(i), tt.l)
		if err != nil {
			t.Fatal(err)
		}
		_, refunds := l.(floodgate.Refunder)
		_, resets := l.(floodgate.Resetter)
		if refunds != tt.refunds || resets != tt.resets {
			t.Errorf("%s: Refunder %v, Resetter %v; want %v, %v", tt.name, refunds, resets, tt.refunds, tt.resets)
		}
		if r := l.(interface{ Rate() floodgate.Rate }).Rate(); r != tt.rate {
			t.Errorf("%s: Rate() = %v, want %v", tt.name, r, tt.rate)
		}
	}
}

// SprayStore allows one request for each of n distinct keys on tb, and
// returns its Stats after; it fails t unless some live key was evicted,
// the case the store metrics must show.
func SprayStore(t *testing.T, tb *floodgate.TokenBucket, n int) floodgate.Stats {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := tb.Allow(context.Background(), "k"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	st := tb.Stats()
	if st.EvictedLive == 0 {
		t.Fatalf("Stats %+v: the spray evicted no live key; the test needs some", st)
	}
	return st
}
