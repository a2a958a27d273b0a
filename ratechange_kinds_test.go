package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// charging is a limiter whose admission kinds follow a change of rate.
type charging interface {
	changeable
	floodgate.Charger
}

// TestSetRateKinds: the cost charged after the response (ChargeN) and a
// booking (ReserveN) follow a change of rate, before and after it, on a
// frozen clock. 4 units charged under 10 an hour stay charged under 20
// (KeepUsed), 3 more are charged under the new rate: 13 of 20 left. A key
// charged 3 under 20 an hour, then 3 more once the rate is down to 5, is
// denied, and a booking of one unit waits for the 2 units the new rate
// gives back (24 minutes at 5 an hour), not the old rate's.
func TestSetRateKinds(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	for name, build := range changeableKinds(clock.Now) {
		t.Run(name, func(t *testing.T) {
			l, err := build(floodgate.PerHour(10))
			if err != nil {
				t.Fatal(err)
			}
			lim := l.(charging)
			step := func(what string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			report := func(key string) floodgate.Decision {
				t.Helper()
				d, err := lim.AllowN(ctx, key, 0)
				step("report "+key, err)
				return d
			}
			step("charge", lim.ChargeN(ctx, "k", 4))
			step("upgrade", lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(20)}))
			step("charge", lim.ChargeN(ctx, "k", 3))
			if d := report("k"); d.Limit != 20 || d.Remaining != 13 {
				t.Fatalf("charged 4 under 10/h and 3 under 20/h: %+v, want Limit 20, Remaining 13", d)
			}
			step("charge", lim.ChargeN(ctx, "j", 3))
			step("downgrade", lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(5)}))
			step("charge", lim.ChargeN(ctx, "j", 3))
			if d := report("j"); d.Limit != 5 || d.Remaining != 0 {
				t.Fatalf("charged 3 under 20/h and 3 under 5/h: %+v, want Limit 5, Remaining 0", d)
			}
			if d, err := lim.AllowN(ctx, "j", 1); err != nil || d.Allowed {
				t.Fatalf("a unit of a key 1 over its new quota: %+v, %v; want denied", d, err)
			}
			res, ok := lim.(floodgate.Reserver)
			if !ok || name == "TokenBucket/IntervalRefill" {
				return // the interval bucket books to its next period: tested on its own
			}
			r, err := res.ReserveN(ctx, "j", 1, time.Hour)
			step("reserve", err)
			if !r.Allowed || r.Wait != 24*time.Minute || r.Limit != 5 {
				t.Fatalf("a booking of 1 unit, 6 used of 5 at 5/h: %+v, want a wait of 24m", r)
			}
		})
	}
}
