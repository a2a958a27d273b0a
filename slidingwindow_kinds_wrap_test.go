package floodgate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A log charged limit units limit times once held limit² units: at
// MaxSlidingLogLimit that is 2^32, where its 32-bit running totals
// wrapped to 0 and the key was allowed at once (Remaining 65535). Its
// debt now saturates at its limits, 2^30 units at most whatever they
// say, and the key stays denied, with a wait that says so, until the
// debt is paid.
func TestLogChargeDoesNotWrap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		debt  int64 // the units the debt saturates at
		limit DebtLimits
	}{
		{"default limits", nil, 24 * MaxSlidingLogLimit, DefaultDebtLimits},
		{"widest limits", []Option{WithMaxDebt(DebtLimits{PerCall: MaxDebtLimit, Total: MaxDebtLimit})}, maxLogDebt, DebtLimits{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			l, err := NewSlidingLog(Rate{Limit: MaxSlidingLogLimit, Period: time.Hour}, append(tc.opts, WithClock(func() time.Time { return now }))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			capped := 0
			for range MaxSlidingLogLimit {
				now = now.Add(time.Millisecond)
				switch err := l.ChargeN(ctx, "k", MaxSlidingLogLimit); {
				case errors.Is(err, ErrDebtCapped):
					capped++
				case err != nil:
					t.Fatal(err)
				}
			}
			d, _ := l.AllowN(ctx, "k", 1)
			// The first charge filled the window; the debt is the rest,
			// paid a window of 2^16 units an hour, from the first charge (the
			// charges took 65.5 s).
			want := time.Duration(tc.debt/MaxSlidingLogLimit+1) * time.Hour
			if d.Allowed || d.Remaining != 0 || d.RetryAfter < want-2*time.Minute || d.RetryAfter > want || capped == 0 {
				t.Fatalf("after 2^32 units charged: %+v, %d charges capped; want denied about %v", d, capped, want)
			}
			now = now.Add(d.RetryAfter)
			if d, _ := l.AllowN(ctx, "k", 1); !d.Allowed {
				t.Fatalf("still denied once the debt was paid: %+v", d)
			}
		})
	}
}
