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

	leaseTokenBucketScript       = newScript(prelude + leasePreludeTokenBucket + leaseTokenBucketSrc)
	leaseTokenBucketRefundScript = newScript(prelude + leasePreludeTokenBucket + leaseTokenBucketRefundSrc)
)

// tbLease is the token bucket's part of the lease mode.
type tbLease struct {
	b      *TokenBucket
	tq, tr string  // the emission interval T = Period/Limit, as µs and remainder
	tNs    float64 // T in ns, for sizing
	// holdMax bounds how far ahead a lease is placed, in ns: the horizon,
	// and the time of MaxShare of the burst, so that placing a lease
	// ahead never costs more than that share.
	holdMax float64
}

// setupLease turns on the lease mode if c asks for it.
func (b *TokenBucket) setupLease(c config) {
	if c.lease == nil {
		return
	}
	tq, tr := bits.Div64(0, b.period, b.limit)
	a := &tbLease{b: b, tq: strconv.FormatUint(tq, 10), tr: strconv.FormatUint(tr, 10),
		tNs: float64(b.period) * 1000 / float64(b.limit)}
	a.holdMax = min(float64(c.lease.Horizon), a.tNs*float64(b.burst)/float64(c.lease.MaxShare))
	b.initLease(c, a, b.burst, leaseTimes{stepNum: b.period * 1000, stepDen: b.limit})
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
// until hold + j·T.
func (a *tbLease) plan(_ *leaseEntry, c *leaseCall, rate float64) {
	h := float64(c.before+c.want-c.n)/rate - float64(c.want-1)*a.tNs
	if h = min(h, a.holdMax); h >= 1000 {
		c.hold = int64(h / 1000)
	}
}

func (a *tbLease) leaseEval(ctx context.Context, key string, c *leaseCall, now string) (floodgate.Decision, error) {
	b := a.b
	r, unrepl, err := b.reply(ctx, leaseTokenBucketScript, b.leaseKeys(key), a.args(c, now), 13)
	if err == nil && (r[1] < 0 || r[1] > int64(c.want) || (r[0] == 1 && r[1] < int64(c.n)) || r[6] < 0 || r[7] < 0 || r[11] < 0 || r[12] < 0) {
		err = errBadReply(r)
	}
	if err != nil {
		return floodgate.Decision{Limit: b.burst}, err
	}
	if r[10] == 1 {
		c.returned = c.retUnits
	}
	if r[0] != 1 {
		c.ran = true
		return a.denied(r[2], r[3], r[4], r[5]), nil // a denial whatever the replication
	}
	if unrepl != nil {
		// A failover could lose the charge: the lease is not used, and
		// the decision fails as a plain one would.
		return floodgate.Decision{Limit: b.burst}, unrepl
	}
	c.ran = true
	c.got, c.ahead = int(r[1]), a.tokens(r[11], r[12])
	c.next = leaseState{units: c.got, anchor: c.anchor, first: a.nanos(r[6], r[7]),
		snap: [3]int64{r[2], r[3]}, endQ: r[8], endR: r[9]}
	return a.granted(c.next, c.got-c.n, c.anchor), nil
}

// args are the lease script's arguments for c.
func (a *tbLease) args(c *leaseCall, now string) []string {
	b := a.b
	args := []string{now, strconv.Itoa(c.n), strconv.Itoa(c.want), a.tq, a.tr, b.tauQ, b.tauR,
		b.limitArg, b.minTTL, strconv.FormatInt(c.hold, 10), "", "", "0", "0"}
	if c.retUnits > 0 {
		q, r := a.units(c.retUnits)
		args[10], args[11] = strconv.FormatInt(c.retQ, 10), strconv.FormatInt(c.retR, 10)
		args[12], args[13] = strconv.FormatUint(q, 10), strconv.FormatUint(r, 10)
	}
	return args
}

// units returns m·T as µs and remainder, for m <= burst.
func (a *tbLease) units(m int) (q, r uint64) {
	hi, lo := bits.Mul64(uint64(min(m, a.b.burst)), a.b.period)
	return bits.Div64(hi, lo, a.b.limit)
}

// tokens returns floor((q + r/Limit)·Limit/Period): the whole units a
// span of q + r/Limit µs holds, for a span of at most tau.
func (a *tbLease) tokens(q, r int64) int {
	hi, lo := bits.Mul64(uint64(q), a.b.limit)
	lo, carry := bits.Add64(lo, uint64(r), 0)
	if hi+carry >= a.b.period { // only a corrupt reply gets here
		return a.b.burst
	}
	t, _ := bits.Div64(hi+carry, lo, a.b.period)
	return int(t)
}

// nanos converts q + r/Limit µs to whole nanoseconds, rounded down.
func (a *tbLease) nanos(q, r int64) int64 {
	return q*1000 + r*1000/int64(a.b.limit)
}

// granted derives the Decision at local time now from the bucket's state
// after the lease (owed µs and fraction at its anchor), as the plain
// script's reply would give it had the lease taken only the units
// allowed so far: the left units still held count as available, and the
// bucket is full again once the rest of its debt is paid.
func (a *tbLease) granted(e leaseState, left int, now int64) floodgate.Decision {
	b := a.b
	q, r := e.snap[0]-max(now-e.anchor, 0)/1000, e.snap[1]
	if left > 0 {
		lq, lr := a.units(left)
		q, r = q-int64(lq), r-int64(lr)
		if r < 0 {
			q, r = q-1, r+int64(b.limit)
		}
	}
	return floodgate.Decision{
		Allowed:    true,
		Limit:      b.burst,
		Remaining:  max(b.burst-b.tokensCeil(q, r), 0),
		ResetAfter: ceilDuration(q, r),
	}
}

// denied derives a denial from the script's reply, as TokenBucket.eval
// does.
func (a *tbLease) denied(owed, frac, wait, wfrac int64) floodgate.Decision {
	b := a.b
	d := floodgate.Decision{Limit: b.burst, ResetAfter: ceilDuration(owed, frac)}
	d.Remaining = max(b.burst-b.tokensCeil(owed, frac), 0)
	if wfrac < 0 {
		wait, wfrac = wait-1, wfrac+int64(b.limit)
	}
	d.RetryAfter = ceilDuration(wait, wfrac)
	return d
}

func (a *tbLease) refundLeased(ctx context.Context, key string, n int, now string) error {
	q, r := a.units(n)
	_, err := leaseTokenBucketRefundScript.run(ctx, a.b.client, a.b.leaseKeys(key),
		[]string{now, strconv.FormatUint(q, 10), strconv.FormatUint(r, 10), a.tq, a.tr, a.b.limitArg, a.b.minTTL})
	return err
}
