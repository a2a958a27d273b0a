package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/conformance"
)

// A client whose calls always cost 5 times their estimate of 1, sending
// 20 at once on a quota of 10 a minute, for 60 minutes: on every
// algorithm the cost it gets per minute averages the limit plus what its
// calls in flight over-spent once, never that again every window; and
// the first denial after the first over-spend waits the same order of
// time everywhere (6 s later: 4m0s on a token bucket, 4m54s on a sliding
// log, 5m0s on a sliding counter). Before debts carried past the window,
// the log and the counter let it spend about 5 times the limit every
// minute, and had it wait 54 s and 1m44s.
func TestOverSpendIsBoundedOverAnyRun(t *testing.T) {
	o := conformance.OverSpend{Limit: 10, Calls: 20, Cost: 5, Period: time.Minute, Periods: 60}
	r := floodgate.Rate{Limit: o.Limit, Period: o.Period}
	waits := map[string]time.Duration{}
	for name, build := range map[string]func(floodgate.Option) (floodgate.Limiter, error){
		"TokenBucket":    func(c floodgate.Option) (floodgate.Limiter, error) { return floodgate.NewTokenBucket(r, c) },
		"SlidingLog":     func(c floodgate.Option) (floodgate.Limiter, error) { return floodgate.NewSlidingLog(r, c) },
		"SlidingCounter": func(c floodgate.Option) (floodgate.Limiter, error) { return floodgate.NewSlidingCounter(r, c) },
	} {
		t.Run(name, func(t *testing.T) {
			clk := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			l, err := build(floodgate.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			res := o.Run(t, l, func(d time.Duration) { clk.Advance(d) })
			if avg := res.PerPeriod(o); avg > float64(o.Limit)*1.2 {
				t.Errorf("%.1f a minute on a limit of %d", avg, o.Limit)
			}
			waits[name] = res.FirstWait
		})
	}
	conformance.SameMagnitude(t, waits)
}
