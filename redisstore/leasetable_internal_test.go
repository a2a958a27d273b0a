package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// fakeAlgo is a leaseAlgo for the table alone: no script is ever run.
type fakeAlgo struct{}

func (fakeAlgo) eval(context.Context, string, int, string) (floodgate.Decision, error) {
	return floodgate.Decision{}, nil
}

func (fakeAlgo) leaseEval(context.Context, string, *leaseCall, string) (floodgate.Decision, error) {
	return floodgate.Decision{}, nil
}

func (fakeAlgo) granted(leaseState, int, int64) floodgate.Decision {
	return floodgate.Decision{Allowed: true}
}

func (fakeAlgo) plan(*leaseEntry, *leaseCall, float64) {}

func (fakeAlgo) refundLeased(context.Context, string, int, string) error { return nil }

func (fakeAlgo) rate(int) leaseRate { return leaseRate{} }

// TestLeaseTableHeldBound drives one key of the lease table through
// random requests, round trips of random delay that grant random shares
// of what they ask, early refreshes and refunds: after every step the key
// holds at most a lease and half (maxUnits·3/2), and never allows a unit
// twice from one lease.
func TestLeaseTableHeldBound(t *testing.T) {
	const maxUnits = 100
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		times := leaseTimes{stepNum: 1000, stepDen: 1}
		tab := newLeaseTable(Lease{MaxKeys: 4, Horizon: DefaultLeaseHorizon, MaxShare: 1}, fakeAlgo{}, leaseRate{times: times, maxUnits: maxUnits})
		now := int64(1)
		for step := 0; step < 5000; step++ {
			now += int64(rng.IntN(3000))
			n := 1 + rng.IntN(3)
			if rng.IntN(5) == 0 {
				tab.giveBack("k", 1+rng.IntN(40), now)
			}
			s := tab.step("k", n, now, true)
			if s.kind == leaseFetch || s.kind == leaseRefresh {
				c := s.call
				c.ran = true
				c.got = c.want // often all it asked for, else a part
				if rng.IntN(2) == 0 {
					c.got = c.n + rng.IntN(c.want-c.n+1)
				}
				if c.got == 0 {
					c.ran = false
				}
				// Slots start when the lease is taken, one every µs.
				c.next = leaseState{units: c.got, anchor: c.anchor, first: 0, times: times}
				end := now + int64(rng.IntN(5000))
				tab.finish("k", s.e, s.flight, &c, floodgate.Decision{Allowed: c.got >= c.n && c.got > 0}, end)
			}
			sh := tab.shard("k")
			sh.mu.Lock()
			e, _ := sh.lru.Peek("k")
			h := e.held()
			sh.mu.Unlock()
			if h > maxUnits*3/2 {
				t.Fatalf("seed %d step %d: the key holds %d units, more than a lease and half (%d)", seed, step, h, maxUnits*3/2)
			}
		}
	}
}
