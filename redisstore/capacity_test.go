package redisstore_test

import (
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestCapacityRefusesUnpayableCost: a Redis limiter reports its capacity
// (a token bucket's burst, a window's limit), so the middleware refuses a
// WithCost no request could ever pay when it is built, as it does for the
// in-memory limiters, instead of answering 429 to every request.
func TestCapacityRefusesUnpayableCost(t *testing.T) {
	srv := &scriptedServer{}
	tb, err := redisstore.NewTokenBucket(srv, floodgate.PerMinute(5), redisstore.WithBurst(8))
	if err != nil {
		t.Fatal(err)
	}
	sl, err := redisstore.NewSlidingLog(srv, floodgate.PerMinute(5))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := redisstore.NewSlidingCounter(srv, floodgate.PerMinute(5))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		l        floodgate.Limiter
		capacity int
	}{{"token bucket", tb, 8}, {"sliding log", sl, 5}, {"sliding counter", sc, 5}} {
		if got := tt.l.(floodgate.Capacitor).Capacity(); got != tt.capacity {
			t.Errorf("%s: Capacity() = %d, want %d", tt.name, got, tt.capacity)
		}
		if _, err := floodgate.NewMiddleware(tt.l, floodgate.WithCost(tt.capacity)); err != nil {
			t.Errorf("%s: WithCost(%d) refused: %v", tt.name, tt.capacity, err)
		}
		_, err := floodgate.NewMiddleware(tt.l, floodgate.WithCost(tt.capacity+1))
		if !errors.Is(err, floodgate.ErrInvalidOption) || !errors.Is(err, floodgate.ErrCostExceedsLimit) {
			t.Errorf("%s: WithCost(%d) gave %v, want ErrInvalidOption and ErrCostExceedsLimit", tt.name, tt.capacity+1, err)
		}
	}
}
