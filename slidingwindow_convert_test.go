package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestSlidingLogScaleUsedKeepsOrder: a log evicted while it carries a
// debt ahead and raised under ScaleUsed never gets more than the log that
// stayed tracked. The concurrency checker found it (issue 28 finding,
// SlidingLogCountDenied/EvictionsNoResets, seed 180750442324228): a log
// of 2/s charged 4 at 0 s (2 now, 2 in the window of 1 s) comes back
// from its remembered debt with its anchor counting the most units a log
// counts, which the change's ScaleUsed (2/s to 10/s) caps where they are:
// its debt gained nothing, while the tracked log's gained 6 units, so at
// 1.1 s the restored key had 8 left where the tracked one had 2. The
// debt's units now gain what any count from its last window's to its
// whole would (inherit.Strategy.Gain): both logs owe 10 in the window of
// 1.5 s (a change anchors a debt at its instant, see SlidingLog.SetRate).
// It runs with the change made while the key is restored and while
// it is only remembered (the store converts the debt as the log it
// restores to).
func TestSlidingLogScaleUsedKeepsOrder(t *testing.T) {
	ctx := context.Background()
	for _, restored := range []bool{true, false} {
		name := "ChangedWhileEvicted"
		if restored {
			name = "ChangedAfterRestore"
		}
		t.Run(name, func(t *testing.T) {
			t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
			clk := &replayClock{t: t0}
			r := floodgate.Rate{Limit: 2, Period: time.Second}
			const maxKeys = 8
			bounded, err := floodgate.NewSlidingLog(r, floodgate.WithClock(clk.now), floodgate.WithMaxKeys(maxKeys), floodgate.WithShards(1))
			mustNot(t, err)
			exact, err := floodgate.NewSlidingLog(r, floodgate.WithClock(clk.now))
			mustNot(t, err)
			for _, l := range []*floodgate.SlidingLog{bounded, exact} {
				mustNot(t, l.ChargeN(ctx, "k", 4))
			}
			clk.t = t0.Add(500 * time.Millisecond)
			evictIdle(t, bounded, maxKeys, r.Limit)
			if restored {
				d, err := bounded.AllowN(ctx, "k", 1)
				mustNot(t, err)
				if st := bounded.Stats(); d.Allowed || st.Restored != 1 {
					t.Fatalf("at 0.5 s the key must come back from its debt, owing until 2 s: %+v, %+v", d, st)
				}
			}
			change := floodgate.RateChange{Rate: floodgate.Rate{Limit: 10, Period: time.Second}, Inherit: floodgate.ScaleUsed}
			for _, l := range []*floodgate.SlidingLog{bounded, exact} {
				mustNot(t, l.SetRate(ctx, change))
			}
			// The tracked log owes 4 + (10 − 2) = 12 in all: 2 at the
			// change, 0.5 s, where the change anchors its debt, and 10 in
			// the window of 1.5 s, so it has no room until 2.5 s.
			for _, step := range []struct {
				at   time.Duration
				want int
			}{{900 * time.Millisecond, 0}, {1100 * time.Millisecond, 0}, {1900 * time.Millisecond, 0}, {2100 * time.Millisecond, 0}, {2400 * time.Millisecond, 0}, {2600 * time.Millisecond, 10}} {
				clk.t = t0.Add(step.at)
				b, err := bounded.AllowN(ctx, "k", 0)
				mustNot(t, err)
				e, err := exact.AllowN(ctx, "k", 0)
				mustNot(t, err)
				if b.Remaining > e.Remaining {
					t.Errorf("at %v the evicted key has %d left, the tracked one %d: forgiven", step.at, b.Remaining, e.Remaining)
				}
				if e.Remaining != step.want {
					t.Errorf("at %v the tracked key has %d left, want %d", step.at, e.Remaining, step.want)
				}
			}
		})
	}
}
