package redisstore

import (
	"context"
	_ "embed"
	"strconv"

	"github.com/floodgate-go/floodgate"
)

// The sliding counter's lease scripts.
var (
	//go:embed scripts/lease_prelude_counter.lua
	leasePreludeCounter string
	//go:embed scripts/lease_slidingcounter.lua
	leaseSlidingCounterSrc string
	//go:embed scripts/lease_slidingcounter_refund.lua
	leaseSlidingCounterRefundSrc string

	leaseSlidingCounterScript       = newScript(prelude + leasePreludeCounter + leaseSlidingCounterSrc)
	leaseSlidingCounterRefundScript = newScript(prelude + leasePreludeCounter + leaseSlidingCounterRefundSrc)
)

// scLease is the sliding counter's part of the lease mode.
type scLease struct{ sc *SlidingCounter }

// setupLease turns on the lease mode if c asks for it. A leased unit lasts
// until the end of the window it was counted in.
func (sc *SlidingCounter) setupLease(c config) {
	if c.lease != nil {
		sc.initLease(c, scLease{sc}, sc.rate.Limit, leaseTimes{stepDen: 1})
	}
}

// LeaseStats reports what leased quota did (WithLease); all zero without
// it.
func (sc *SlidingCounter) LeaseStats() LeaseStats { return sc.leaseStats() }

// leaseKeys is the counter, which holds its leased units too.
func (sc *SlidingCounter) leaseKeys(key string) []string { return sc.keys(key) }

func (a scLease) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return a.sc.eval(ctx, key, n, now)
}

// plan keeps a lease within what the key's local rate spends before the
// window ends, known from the key's last lease: the rest would be lost.
func (a scLease) plan(e *leaseEntry, c *leaseCall, rate float64) {
	if e.first <= 0 {
		return
	}
	end := e.anchor + e.first
	if c.anchor >= end {
		end += ((c.anchor-end)/a.sc.period + 1) * a.sc.period
	}
	c.want = max(c.n, min(c.want, c.n+ceilWant(rate*float64(end-c.anchor)-float64(c.before), c.want)))
}

func (a scLease) leaseEval(ctx context.Context, key string, c *leaseCall, now string) (floodgate.Decision, error) {
	sc := a.sc
	args := []string{now, strconv.Itoa(c.n), strconv.Itoa(c.want), sc.limitArg, sc.periodArg, sc.originArg, sc.minTTL, "", "0"}
	if c.retUnits > 0 {
		args[7], args[8] = strconv.FormatInt(c.retQ, 10), strconv.Itoa(c.retUnits)
	}
	r, unrepl, err := sc.reply(ctx, leaseSlidingCounterScript, sc.leaseKeys(key), args, 6)
	limit := int64(sc.rate.Limit)
	if err == nil && (r[1] < 0 || r[2] < 0 || r[1] > limit || r[2] > limit || r[3] < 0 || r[3] >= maxMicros ||
		r[4] < 0 || r[4] > int64(c.want) || (r[0] == 1 && r[4] < int64(c.n)) || r[5] < 0) {
		err = errBadReply(r)
	}
	if err != nil {
		return floodgate.Decision{Limit: sc.rate.Limit}, err
	}
	c.returned = int(r[5])
	if r[0] != 1 {
		c.ran = true
		return a.decision(false, r[1], r[2], r[3], 0, c.n), nil // a denial whatever the replication
	}
	if unrepl != nil {
		// A failover could lose the count: the lease is not used, and
		// the decision fails as a plain one would.
		return floodgate.Decision{Limit: sc.rate.Limit}, unrepl
	}
	c.ran = true
	c.got = int(r[4])
	periodUs := sc.period / 1000
	w := r[3] / periodUs
	c.next = leaseState{units: c.got, anchor: c.anchor, first: ((w+1)*periodUs - r[3]) * 1000,
		snap: [3]int64{r[1], r[2], r[3]}, endQ: w}
	return a.granted(c.next, c.got-c.n, c.anchor), nil
}

// granted derives the Decision at local time now from the counts after
// the lease, as the plain script's reply would give it had the lease
// counted only the units allowed so far.
func (a scLease) granted(e leaseState, left int, now int64) floodgate.Decision {
	return a.decision(true, e.snap[0], max(e.snap[1]-int64(left), 0), e.snap[2], max(now-e.anchor, 0), 0)
}

// decision derives a Decision from the counts prev and cur at nowUs (µs
// since the windows' origin) plus age ns, never past the window's end, as
// SlidingCounter.eval does.
func (a scLease) decision(allowed bool, prev, cur, nowUs, age int64, n int) floodgate.Decision {
	sc := a.sc
	now64 := nowUs * 1000
	start := now64 / sc.period * sc.period
	now64 = min(now64+age, start+sc.period)
	limit := sc.rate.Limit
	d := floodgate.Decision{Allowed: allowed, Limit: limit}
	d.Remaining = max(limit-int(cur)-int(sc.est.Share(uint32(prev), sc.period-(now64-start))), 0)
	switch {
	case cur > 0:
		d.ResetAfter = ceilMicros(start + 2*sc.period - now64)
	case prev > 0:
		d.ResetAfter = ceilMicros(start + sc.period - now64)
	}
	if !allowed {
		d.RetryAfter = ceilMicros(sc.est.RetryAt(start, uint32(prev), uint32(cur), uint32(n)) - now64)
	}
	return d
}

func (a scLease) refundLeased(ctx context.Context, key string, n int, now string) error {
	sc := a.sc
	_, err := leaseSlidingCounterRefundScript.run(ctx, sc.client, sc.leaseKeys(key),
		[]string{now, strconv.Itoa(n), sc.limitArg, sc.periodArg, sc.originArg, sc.minTTL})
	return err
}
