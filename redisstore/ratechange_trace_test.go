package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestRateChangeOutlivesEmptiedKey: a change of rate reaches instance a
// (it made it) but not yet b (its refresh interval is not over, as for
// every instance while SetRate waits). a decides a key under the new rate
// and leaves nothing of it in Redis: b must still never decide that key
// under the old rate (ratechange.go: "no key, once decided under the new
// rate, is ever decided under the old one again"). The key's version
// lived only in its state: once the state was gone b decided under the
// old rate, as the checker found (#111 under the new rate, #112's refund
// emptying the key, #107 under the old rate with the old reset). An
// emptied key now keeps its version (prelude_rate.lua, rate_get).
func TestRateChangeOutlivesEmptiedKey(t *testing.T) {
	ctx := context.Background()
	empty := []struct {
		name string
		// under runs a's decision under the new rate (Limit 4) and
		// empties the key.
		under func(t *testing.T, a changing)
	}{
		{"Refunded", func(t *testing.T, a changing) {
			if d := mustAllowed(t, a, "k", 1, true); d.Limit != 4 || d.Remaining != 3 {
				t.Fatalf("a under the new rate: %+v, want Limit 4, Remaining 3", d)
			}
			mustNot(t, a.(floodgate.Refunder).RefundN(ctx, "k", 1))
		}},
		{"Reset", func(t *testing.T, a changing) {
			if d := mustAllowed(t, a, "k", 1, true); d.Limit != 4 || d.Remaining != 3 {
				t.Fatalf("a under the new rate: %+v, want Limit 4, Remaining 3", d)
			}
			mustNot(t, a.Reset(ctx, "k"))
		}},
		{"Probed", func(t *testing.T, a changing) {
			if d := mustAllowed(t, a, "k", 0, true); d.Limit != 4 || d.Remaining != 4 {
				t.Fatalf("a's probe under the new rate: %+v, want Limit 4, Remaining 4", d)
			}
		}},
	}
	for where, pair := range pairs(t) {
		for _, alg := range changingAlgos {
			for _, e := range empty {
				t.Run(where+"/"+alg.name+"/"+e.name, func(t *testing.T) {
					sa, sb := pair(t)
					clock := &fakeClock{t0}
					p := prefix(t)
					a, err := alg.new(sa, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
						redisstore.WithRateRefresh(time.Millisecond), patient)
					mustNot(t, err)
					// b stands for an instance in SetRate's wait: it read the
					// record before the change and has not read it since.
					b, err := alg.new(sb, floodgate.PerHour(10), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
						redisstore.WithRateRefresh(time.Hour), patient)
					mustNot(t, err)
					mustAllowed(t, b, "warm", 1, true) // b reads the record (none) now, and not for an hour
					mustNot(t, a.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(4), Inherit: floodgate.KeepUsed}))
					e.under(t, a)
					if d := mustAllowed(t, b, "k", 1, true); d.Limit != 4 || d.Remaining != 3 {
						t.Fatalf("b on a key a decided under the new rate and emptied: %+v, want Limit 4, Remaining 3", d)
					}
				})
			}
		}
	}
}
