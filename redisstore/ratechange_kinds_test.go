package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestRateChangeKinds: the cost charged after the response (ChargeN) and a
// booking (ReserveN) follow a change of rate made on another instance, on
// one server and on a Cluster, on a frozen clock. Instance a charges 4
// under 10 an hour; b upgrades to 20; a charges 3 more: 13 of 20 left (a
// converted the key before charging it). a charges 3 of another key under
// 20; b downgrades to 5; a converts the key and charges 3 more. A third
// instance c, which read the record before the changes and not since
// (its refresh interval is an hour), charges 1 more: its script meets a
// state of a newer version, and c reads the record again and charges
// under 5 an hour. 7 of 5 used: a unit is denied, and a booking of one by
// c waits for the 3 units 5 an hour gives back, 36 minutes.
func TestRateChangeKinds(t *testing.T) {
	for where, pair := range pairs(t) {
		for _, alg := range changingAlgos {
			t.Run(where+"/"+alg.name, func(t *testing.T) {
				sa, sb := pair(t)
				clock := &fakeClock{t0}
				p := prefix(t)
				a, err := alg.new(sa, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(time.Millisecond), patient)
				mustNot(t, err)
				b, err := alg.new(sb, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(time.Millisecond), patient)
				mustNot(t, err)
				c, err := alg.new(sb, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(time.Hour), patient)
				mustNot(t, err)
				mustAllowed(t, c, "warm", 0, true) // c reads the record (none) now, and not for an hour
				ctx := context.Background()
				charge := a.(floodgate.Charger)
				mustNot(t, charge.ChargeN(ctx, "k", 4))
				mustNot(t, b.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(20)}))
				mustNot(t, charge.ChargeN(ctx, "k", 3))
				if d := mustAllowed(t, b, "k", 0, true); d.Limit != 20 || d.Remaining != 13 {
					t.Fatalf("charged 4 under 10/h and 3 under 20/h: %+v, want Limit 20, Remaining 13", d)
				}
				mustNot(t, charge.ChargeN(ctx, "j", 3))
				mustNot(t, b.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(5)}))
				mustNot(t, charge.ChargeN(ctx, "j", 3))
				mustNot(t, c.(floodgate.Charger).ChargeN(ctx, "j", 1))
				if r := c.Rate(); r != floodgate.PerHour(5) {
					t.Fatalf("c after it met the converted key: rate %v, want 5/h", r)
				}
				if d := mustAllowed(t, b, "j", 1, false); d.Limit != 5 || d.Remaining != 0 {
					t.Fatalf("charged 3 under 20/h and 3 under 5/h: %+v, want Limit 5, Remaining 0", d)
				}
				res, ok := c.(floodgate.Reserver)
				if !ok || alg.name == "TokenBucket/IntervalRefill" {
					return // the interval bucket books to its next period
				}
				r, err := res.ReserveN(ctx, "j", 1, time.Hour)
				mustNot(t, err)
				if !r.Allowed || r.Wait != 36*time.Minute || r.Limit != 5 {
					t.Fatalf("a booking of 1 unit, 7 used of 5 at 5/h: %+v, want a wait of 36m", r)
				}
			})
		}
	}
}
