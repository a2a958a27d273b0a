package floodgate

import (
	"context"
	"testing"
	"time"
)

// A log charged limit units limit times holds limit² units: at
// MaxSlidingLogLimit that is 2^32, where its 32-bit running totals
// wrapped to 0 and the key was allowed at once (Remaining 65535). It
// folds before that, and stays denied until the window has passed.
func TestLogChargeDoesNotWrap(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l, err := NewSlidingLog(Rate{Limit: MaxSlidingLogLimit, Period: time.Hour}, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range MaxSlidingLogLimit {
		now = now.Add(time.Millisecond)
		if err := l.ChargeN(ctx, "k", MaxSlidingLogLimit); err != nil {
			t.Fatal(err)
		}
	}
	last := now
	if d, _ := l.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatalf("allowed after 2^32 units charged: %+v", d)
	}
	now = last.Add(time.Hour - time.Millisecond)
	if d, _ := l.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatalf("allowed before the last charge left the window: %+v", d)
	}
	now = last.Add(time.Hour)
	if d, _ := l.AllowN(ctx, "k", 1); !d.Allowed {
		t.Fatalf("still denied once every charge left the window: %+v", d)
	}
}
