package floodgate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Charges that put a key in debt, made at once from many goroutines (as
// the settlements of concurrent calls are), leave the key exactly where
// the same charges made one after another do, on every algorithm: the
// same Decision afterwards, field by field, and as many charges capped.
// Reports (AllowN of 0) run beside them and never see the key with more
// room than it started with. With the default limits the debt (390 units
// on 10 a minute) is carried whole; with a total limit of 10 minutes, the
// charges beyond it are capped, whichever goroutine makes them.
func TestConcurrentChargesAddUp(t *testing.T) {
	const goroutines, charges, cost = 8, 10, 5
	r := floodgate.Rate{Limit: 10, Period: time.Minute}
	for _, limits := range []struct {
		name string
		opts []floodgate.Option
	}{
		{"default limits", nil},
		{"total 10m", []floodgate.Option{floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: time.Minute, Total: 10 * time.Minute})}},
	} {
		for name, build := range debtKinds(r) {
			t.Run(limits.name+"/"+name, func(t *testing.T) {
				now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
				newLimiter := func() (floodgate.Limiter, floodgate.Charger) {
					l, err := build(append([]floodgate.Option{floodgate.WithClock(func() time.Time { return now })}, limits.opts...)...)
					if err != nil {
						t.Fatal(err)
					}
					return l, l.(floodgate.Charger)
				}
				ctx := context.Background()
				charge := func(ch floodgate.Charger) (capped bool) {
					err := ch.ChargeN(ctx, "k", cost)
					if err != nil && !errors.Is(err, floodgate.ErrDebtCapped) {
						t.Error(err)
					}
					return err != nil
				}

				seqL, seqC := newLimiter()
				seqCapped := 0
				for range goroutines * charges {
					if charge(seqC) {
						seqCapped++
					}
				}

				conL, conC := newLimiter()
				var mu sync.Mutex
				conCapped := 0
				var wg sync.WaitGroup
				for range goroutines {
					wg.Add(2)
					go func() {
						defer wg.Done()
						for range charges {
							if charge(conC) {
								mu.Lock()
								conCapped++
								mu.Unlock()
							}
						}
					}()
					go func() {
						defer wg.Done()
						for range charges {
							d, err := conL.AllowN(ctx, "k", 0)
							if err != nil || d.Remaining > r.Limit {
								t.Errorf("a report beside the charges: %+v, %v", d, err)
							}
						}
					}()
				}
				wg.Wait()

				want, err := seqL.AllowN(ctx, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				got, err := conL.AllowN(ctx, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if got != want || conCapped != seqCapped {
					t.Errorf("concurrent charges: %+v, %d capped; one after another: %+v, %d capped", got, conCapped, want, seqCapped)
				}
				t.Logf("%d charges of %d: RetryAfter %v, %d capped", goroutines*charges, cost, want.RetryAfter, seqCapped)
				if want.Allowed || want.RetryAfter < 10*time.Minute {
					t.Errorf("one after another: %+v, want denied for 10 minutes at least", want)
				}
			})
		}
	}
}
