package redisstore

import (
	"context"
	_ "embed"
	"math/bits"
	"strconv"

	"github.com/floodgate-go/floodgate"
)

// The token bucket's lease scripts.
var (
	//go:embed scripts/lease_prelude_tokenbucket.lua
	leasePreludeTokenBucket string
	//go:embed scripts/lease_tokenbucket.lua
	leaseTokenBucketSrc string
	//go:embed scripts/lease_tokenbucket_refund.lua
	leaseTokenBucketRefundSrc string

	leaseTokenBucketScript       = newScript(prelude + preludeRate + leasePreludeTokenBucket + leaseTokenBucketSrc)
	leaseTokenBucketRefundScript = newScript(prelude + preludeRate + leasePreludeTokenBucket + leaseTokenBucketRefundSrc)
)

// tbLease is the token bucket's part of the lease mode. What depends on
// the rate comes from the rate each lease is taken under (see
// TokenBucket.SetRate).
type tbLease struct {
	b       *TokenBucket
	horizon float64 // Lease.Horizon in ns
	share   int     // Lease.MaxShare
}

// setupLease turns on the lease mode if c asks for it.
func (b *TokenBucket) setupLease(c config) {
	if c.lease == nil {
		return
	}
	b.initLease(c, &tbLease{b: b, horizon: float64(c.lease.Horizon), share: c.lease.MaxShare})
}

// rate returns what leases depend on of the bucket's current rate.
func (a *tbLease) rate(maxShare int) leaseRate {
	p := a.b.params()
	return leaseRate{times: leaseTimes{stepNum: p.period * 1000, stepDen: p.limit}, maxUnits: max(1, p.burst/maxShare)}
}

// LeaseStats reports what leased quota did (WithLease); all zero without
// it.
func (b *TokenBucket) LeaseStats() LeaseStats { return b.leaseStats() }

// leaseKeys is the bucket, which holds its lease mark too.
func (b *TokenBucket) leaseKeys(key string) []string { return []string{b.key(key)} }

func (a *tbLease) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return a.b.eval(ctx, key, n, now)
}

// plan places the lease's slots far enough ahead that, at the key's local
// rate, its last unit is allowed before its slot begins: unit j of the
// lease is needed about (before+j-n+1)/rate after now and may be allowed
// until hold + j·T. hold is at most the horizon, and the time of MaxShare
// of the burst, so that placing a lease ahead never costs more than that
// share.
func (a *tbLease) plan(_ *leaseEntry, c *leaseCall, rate float64) {
	p := a.b.params()
	tNs := p.tNs()
	h := float64(c.before+c.want-c.n)/rate - float64(c.want-1)*tNs
	if h = min(h, a.horizon, tNs*float64(p.burst)/float64(a.share)); h >= 1000 {
		c.hold = int64(h / 1000)
	}
}

// tNs returns the emission interval T = Period/Limit in ns, for sizing.
func (p *tbParams) tNs() float64 { return float64(p.period) * 1000 / float64(p.limit) }

func (a *tbLease) leaseEval(ctx context.Context, key string, c *leaseCall, now string) (floodgate.Decision, error) {
	b := a.b
	for range maxRateTries {
		v := b.rates.view.Load()
		p := v.alg.(*tbParams)
		r, unrepl, err := b.reply(ctx, leaseTokenBucketScript, b.leaseKeys(key), a.args(p, v, c, now), -1)
		if err == nil {
			if again, err := b.rateMet(ctx, key, now, r, b.eval); again || err != nil {
				if err != nil {
					return floodgate.Decision{Limit: p.burst}, err
				}
				continue
			}
			err = expectInts(r, 13)
		}
		if err == nil && (r[1] < 0 || r[1] > int64(c.want) || (r[0] == 1 && r[1] < int64(c.n)) || r[6] < 0 || r[7] < 0 || r[11] < 0 || r[12] < 0) {
			err = errBadReply(r)
		}
		if err != nil {
			return floodgate.Decision{Limit: p.burst}, err
		}
		if r[10] == 1 {
			c.returned = c.retUnits
		}
		if r[0] != 1 {
			c.ran = true
			return p.denied(r[2], r[3], r[4], r[5]), nil // a denial whatever the replication
		}
		if unrepl != nil {
			// A failover could lose the charge: the lease is not used, and
			// the decision fails as a plain one would.
			return floodgate.Decision{Limit: p.burst}, unrepl
		}
		c.ran = true
		c.got, c.ahead = int(r[1]), p.tokens(r[11], r[12])
		c.next = leaseState{units: c.got, anchor: c.anchor, first: p.nanos(r[6], r[7]),
			snap: [3]int64{r[2], r[3]}, endQ: r[8], endR: r[9],
			times: leaseTimes{stepNum: p.period * 1000, stepDen: p.limit}, alg: p}
		return a.granted(c.next, c.got-c.n, c.anchor), nil
	}
	return floodgate.Decision{Limit: b.limit()}, errRateChurn
}

// args are the lease script's arguments for c under rate p of view v.
func (a *tbLease) args(p *tbParams, v *rateView, c *leaseCall, now string) []string {
	tq, tr := bits.Div64(0, p.period, p.limit)
	args := []string{now, strconv.Itoa(c.n), strconv.Itoa(c.want), strconv.FormatUint(tq, 10), strconv.FormatUint(tr, 10),
		p.tauQ, p.tauR, p.limitArg, v.minTTL, strconv.FormatInt(c.hold, 10), "", "", "0", "0", v.ver, v.suffix}
	if c.retUnits > 0 && c.retAlg == p {
		q, r := p.units(c.retUnits)
		args[10], args[11] = strconv.FormatInt(c.retQ, 10), strconv.FormatInt(c.retR, 10)
		args[12], args[13] = strconv.FormatUint(q, 10), strconv.FormatUint(r, 10)
	}
	return args
}

// units returns m·T as µs and remainder, for m <= burst.
func (p *tbParams) units(m int) (q, r uint64) {
	hi, lo := bits.Mul64(uint64(min(m, p.burst)), p.period)
	return bits.Div64(hi, lo, p.limit)
}

// tokens returns floor((q + r/Limit)·Limit/Period): the whole units a
// span of q + r/Limit µs holds, for a span of at most tau.
func (p *tbParams) tokens(q, r int64) int {
	hi, lo := bits.Mul64(uint64(q), p.limit)
	lo, carry := bits.Add64(lo, uint64(r), 0)
	if hi+carry >= p.period { // only a corrupt reply gets here
		return p.burst
	}
	t, _ := bits.Div64(hi+carry, lo, p.period)
	return int(t)
}

// nanos converts q + r/Limit µs to whole nanoseconds, rounded down.
func (p *tbParams) nanos(q, r int64) int64 {
	return q*1000 + r*1000/int64(p.limit)
}

// granted derives the Decision at local time now from the bucket's state
// after the lease (owed µs and fraction at its anchor), as the plain
// script's reply would give it had the lease taken only the units
// allowed so far: the left units still held count as available, and the
// bucket is full again once the rest of its debt is paid. The rate is the
// one the lease was taken under.
func (a *tbLease) granted(e leaseState, left int, now int64) floodgate.Decision {
	p := e.alg.(*tbParams)
	q, r := e.snap[0]-max(now-e.anchor, 0)/1000, e.snap[1]
	if left > 0 {
		lq, lr := p.units(left)
		q, r = q-int64(lq), r-int64(lr)
		if r < 0 {
			q, r = q-1, r+int64(p.limit)
		}
	}
	return floodgate.Decision{
		Allowed:    true,
		Limit:      p.burst,
		Remaining:  max(p.burst-p.tokensCeil(q, r), 0),
		ResetAfter: ceilDuration(q, r),
	}
}

// denied derives a denial from the script's reply, as TokenBucket.eval
// does.
func (p *tbParams) denied(owed, frac, wait, wfrac int64) floodgate.Decision {
	d := floodgate.Decision{Limit: p.burst, ResetAfter: ceilDuration(owed, frac)}
	d.Remaining = max(p.burst-p.tokensCeil(owed, frac), 0)
	if wfrac < 0 {
		wait, wfrac = wait-1, wfrac+int64(p.limit)
	}
	d.RetryAfter = ceilDuration(wait, wfrac)
	return d
}

// refundLeased gives n tokens back to Redis, never below the lease mark.
func (a *tbLease) refundLeased(ctx context.Context, key string, n int, now string) error {
	b := a.b
	return b.refundRated(ctx, b.leaseKeys(key), now, func(v *rateView) (*script, []string) {
		p := v.alg.(*tbParams)
		q, r := p.units(n)
		tq, tr := bits.Div64(0, p.period, p.limit)
		return leaseTokenBucketRefundScript, []string{now, strconv.FormatUint(q, 10), strconv.FormatUint(r, 10),
			strconv.FormatUint(tq, 10), strconv.FormatUint(tr, 10), p.limitArg, v.minTTL, v.ver, v.suffix}
	}, b.eval, key)
}
