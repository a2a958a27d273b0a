package floodgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// waiter is what every in-memory limiter offers beside AllowN.
type waiter interface {
	floodgate.Limiter
	WaitN(ctx context.Context, key string, n int) error
}

func TestSlidingLimitersWaitN(t *testing.T) {
	rate := floodgate.Rate{Limit: 2, Period: time.Minute}
	now := time.Unix(1_700_000_000, 0)
	clock := floodgate.WithClock(func() time.Time { return now })
	log, err := floodgate.NewSlidingLog(rate, clock)
	if err != nil {
		t.Fatal(err)
	}
	counter, err := floodgate.NewSlidingCounter(rate, clock)
	if err != nil {
		t.Fatal(err)
	}
	for name, lim := range map[string]waiter{"sliding log": log, "sliding counter": counter} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Room for both events: WaitN returns at once and records them.
			if err := lim.WaitN(ctx, "k", 2); err != nil {
				t.Fatalf("WaitN with room: %v", err)
			}
			d, _ := lim.AllowN(ctx, "k", 0)
			if d.Remaining != 0 {
				t.Fatalf("Remaining after WaitN(2) = %d, want 0", d.Remaining)
			}
			// The window frees up in a minute; a 10 s deadline cannot be met,
			// and WaitN says so without waiting.
			short, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := lim.WaitN(short, "k", 1); !errors.Is(err, floodgate.ErrWouldExceedDeadline) {
				t.Fatalf("WaitN past the deadline = %v, want ErrWouldExceedDeadline", err)
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Fatalf("WaitN waited %s before failing", waited)
			}
			if err := lim.WaitN(ctx, "k", 3); !errors.Is(err, floodgate.ErrCostExceedsLimit) {
				t.Fatalf("WaitN(3) with limit 2 = %v, want ErrCostExceedsLimit", err)
			}
		})
	}
}
