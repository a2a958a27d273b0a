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

	leaseSlidingCounterScript       = newScript(prelude + preludeRate + leasePreludeCounter + leaseSlidingCounterSrc)
	leaseSlidingCounterRefundScript = newScript(prelude + preludeRate + leasePreludeCounter + leaseSlidingCounterRefundSrc)
)

// scLease is the sliding counter's part of the lease mode.
type scLease struct{ sc *SlidingCounter }

// setupLease turns on the lease mode if c asks for it. A leased unit lasts
// until the end of the window it was counted in; the units a lease leaves
// unused go back to that window, with the key's next round trip or, on
// the server's clock, a timer when the lease ends.
func (sc *SlidingCounter) setupLease(c config) {
	if c.lease == nil {
		return
	}
	sc.initLease(c, scLease{sc})
	sc.lease.keepTails = true
	if c.now == nil {
		// A client clock (WithClock) need not move with real time: a
		// timer could not tell when its leases end.
		sc.lease.ended = sc.endLease
	}
}

// rate returns what leases depend on of the counter's current rate.
func (a scLease) rate(maxShare int) leaseRate {
	return leaseRate{times: leaseTimes{stepDen: 1}, maxUnits: max(1, a.sc.params().rate.Limit/maxShare)}
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
	period := a.sc.params().period
	end := e.anchor + e.first + 1 // the window's end (see leaseEval)
	if c.anchor >= end {
		end += ((c.anchor-end)/period + 1) * period
	}
	c.want = max(c.n, min(c.want, c.n+ceilWant(rate*float64(end-c.anchor)-float64(c.before), c.want)))
}

// leaseReserve is the room a counter's lease leaves a key of the given
// limit: half a lease, max(1, limit/(2·maxShare)). Near its limit the key
// is decided one request at a time, so that the units instances hold
// unused never starve a request the exact counter would allow.
func leaseReserve(limit, maxShare int) int { return max(1, limit/(2*maxShare)) }

func (a scLease) leaseEval(ctx context.Context, key string, c *leaseCall, now string) (floodgate.Decision, error) {
	sc := a.sc
	for range maxRateTries {
		v := sc.rates.view.Load()
		p := v.alg.(*scParams)
		args := []string{now, strconv.Itoa(c.n), strconv.Itoa(c.want), p.limitArg, p.periodArg, sc.originArg, sc.minTTL, "", "0", v.ver, v.suffix,
			strconv.Itoa(leaseReserve(p.rate.Limit, sc.lease.cfg.MaxShare))}
		if c.retUnits > 0 && c.retAlg == p {
			args[7], args[8] = strconv.FormatInt(c.retQ, 10), strconv.Itoa(c.retUnits)
		}
		r, unrepl, err := sc.reply(ctx, leaseSlidingCounterScript, sc.leaseKeys(key), args, -1)
		if err == nil {
			if again, err := sc.rateMet(ctx, key, now, r, sc.eval); again || err != nil {
				if err != nil {
					return floodgate.Decision{Limit: p.rate.Limit}, err
				}
				continue
			}
			err = expectInts(r, 6)
		}
		limit := int64(maxLimit)
		if err == nil && (r[1] < 0 || r[2] < 0 || r[1] > limit || r[2] > limit || r[3] < 0 || r[3] >= maxMicros ||
			r[4] < 0 || r[4] > int64(c.want) || (r[0] == 1 && r[4] < int64(c.n)) || r[5] < 0) {
			err = errBadReply(r)
		}
		if err != nil {
			return floodgate.Decision{Limit: p.rate.Limit}, err
		}
		c.returned = int(r[5])
		if r[0] != 1 {
			c.ran = true
			return p.decision(false, r[1], r[2], r[3], 0, c.n), nil // a denial whatever the replication
		}
		if unrepl != nil {
			// A failover could lose the count: the lease is not used, and
			// the decision fails as a plain one would.
			return floodgate.Decision{Limit: p.rate.Limit}, unrepl
		}
		c.ran = true
		c.got = int(r[4])
		periodUs := p.period / 1000
		w := r[3] / periodUs
		// first is the window's last nanosecond, not its end: a lease's
		// deadline is inclusive (a token bucket's unit may be allowed at
		// the start of its slot), and at the end the next window has
		// begun, where a unit counted in this one would weigh only as
		// the previous window's share.
		c.next = leaseState{units: c.got, anchor: c.anchor, first: ((w+1)*periodUs-r[3])*1000 - 1,
			snap: [3]int64{r[1], r[2], r[3]}, endQ: w, times: leaseTimes{stepDen: 1}, alg: p}
		return a.granted(c.next, c.got-c.n, c.anchor), nil
	}
	return floodgate.Decision{Limit: sc.limit()}, errRateChurn
}

// granted derives the Decision at local time now from the counts after
// the lease, as the plain script's reply would give it had the lease
// counted only the units allowed so far, under the rate the lease was
// taken under.
func (a scLease) granted(e leaseState, left int, now int64) floodgate.Decision {
	return e.alg.(*scParams).decision(true, e.snap[0], max(e.snap[1]-int64(left), 0), e.snap[2], max(now-e.anchor, 0), 0)
}

// decision derives a Decision from the counts prev and cur at nowUs (µs
// since the windows' origin) plus age ns, never past the window's end, as
// SlidingCounter.eval does.
func (p *scParams) decision(allowed bool, prev, cur, nowUs, age int64, n int) floodgate.Decision {
	now64 := nowUs * 1000
	start := now64 / p.period * p.period
	now64 = min(now64+age, start+p.period)
	limit := p.rate.Limit
	d := floodgate.Decision{Allowed: allowed, Limit: limit}
	d.Remaining = max(limit-int(cur)-int(p.est.Share(uint32(prev), p.period-(now64-start))), 0)
	switch {
	case cur > 0:
		d.ResetAfter = ceilMicros(start + 2*p.period - now64)
	case prev > 0:
		d.ResetAfter = ceilMicros(start + p.period - now64)
	}
	if !allowed {
		d.RetryAfter = ceilMicros(p.est.RetryAt(start, uint32(prev), uint32(cur), uint32(n)) - now64)
	}
	return d
}

// refundLeased gives n events back to Redis, never the units leased in
// the current window.
func (a scLease) refundLeased(ctx context.Context, key string, n int, now string) error {
	sc := a.sc
	return sc.refundRated(ctx, sc.leaseKeys(key), now, func(v *rateView) (*script, []string) {
		p := v.alg.(*scParams)
		return leaseSlidingCounterRefundScript, []string{now, strconv.Itoa(n), p.limitArg, p.periodArg, sc.originArg, sc.minTTL, v.ver, v.suffix}
	}, sc.eval, key)
}
