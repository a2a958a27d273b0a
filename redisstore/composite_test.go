package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestComposite: Redis limiters combine with floodgate.All, which refunds
// through RefundN. Three per minute within ten per hour: the fourth
// request is denied by the first and costs the second nothing; the
// Composite's own RefundN gives a unit back to both.
func TestComposite(t *testing.T) {
	addr := redistest.Shared(t)
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			clock := &fakeClock{t0}
			clk := redisstore.WithClock(clock.Now)
			perMinute, err := redisstore.NewSlidingLog(c.s, floodgate.PerMinute(3), clk, patient, redisstore.WithPrefix(prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			perHour, err := redisstore.NewTokenBucket(c.s, floodgate.PerHour(10), clk, patient, redisstore.WithPrefix(prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			both, err := floodgate.All(perMinute, perHour)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < 3; i++ {
				mustAllowed(t, both, "k", 1, true)
			}
			if d := mustAllowed(t, both, "k", 1, false); d.RetryAfter != time.Minute {
				t.Errorf("fourth request: RetryAfter %v, want 1m", d.RetryAfter)
			}
			if d := mustAllowed(t, perHour, "k", 0, true); d.Remaining != 7 {
				t.Errorf("hourly bucket Remaining %d after 3 allowed and 1 denied, want 7", d.Remaining)
			}
			if err := both.RefundN(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			if d := mustAllowed(t, perHour, "k", 0, true); d.Remaining != 8 {
				t.Errorf("hourly bucket Remaining %d after a refund, want 8", d.Remaining)
			}
			mustAllowed(t, both, "k", 1, true)
		})
	}
}
