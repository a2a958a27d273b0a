package metricsbase

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
)

// TestTimedRecords: each AllowN is one record, of the time between the
// clock's two readings, with the AllowN context; the decision passes
// through unchanged.
func TestTimedRecords(t *testing.T) {
	tb := newBucket(t)
	clock := time.Unix(100, 0)
	now := func() time.Time {
		clock = clock.Add(3 * time.Millisecond)
		return clock
	}
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "req")
	var got []time.Duration
	l := Timed(tb, now, func(c context.Context, d time.Duration) {
		if c.Value(ctxKey{}) != "req" {
			t.Error("record did not get the AllowN context")
		}
		got = append(got, d)
	})
	for i := 0; i < 3; i++ {
		d, err := l.AllowN(ctx, "k", 4)
		if wantAllowed := i < 2; err != nil || d.Allowed != wantAllowed || d.Limit != 10 {
			t.Fatalf("decision %d: %+v, %v; want allowed %v of 10", i, d, err, wantAllowed)
		}
	}
	if len(got) != 3 || got[0] != 3*time.Millisecond || got[2] != 3*time.Millisecond {
		t.Fatalf("recorded %v, want three of 3ms", got)
	}
}

// TestTimedKeepsInterfaces: the wrapper is a Refunder, a Resetter and
// reports a Rate exactly as the limiter it wraps, and refunds and resets
// reach that limiter untimed.
func TestTimedKeepsInterfaces(t *testing.T) {
	tb := newBucket(t)
	records := 0
	wrap := func(l floodgate.Limiter) floodgate.Limiter {
		return Timed(l, time.Now, func(context.Context, time.Duration) { records++ })
	}
	metricstest.KeepsInterfaces(t, func(_ string, l floodgate.Limiter) (floodgate.Limiter, error) {
		return wrap(l), nil
	})
	ctx := context.Background()
	l := wrap(tb)
	if _, err := l.AllowN(ctx, "k", 6); err != nil {
		t.Fatal(err)
	}
	if err := l.(floodgate.Refunder).RefundN(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	if d, _ := tb.AllowN(ctx, "k", 0); d.Remaining != 6 {
		t.Fatalf("after a refund of 2: %d remaining, want 6", d.Remaining)
	}
	if err := l.(floodgate.Resetter).Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := tb.AllowN(ctx, "k", 0); d.Remaining != 10 {
		t.Fatalf("after Reset: %d remaining, want 10", d.Remaining)
	}
	if records != 1 {
		t.Fatalf("%d records, want 1: refunds and resets are not timed", records)
	}
}
