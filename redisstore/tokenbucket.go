package redisstore

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/inherit"
)

// TokenBucket is a token-bucket limiter whose buckets live in Redis, so
// that every instance of a service shares them. It makes the decisions
// floodgate.TokenBucket makes in memory (greedy refill; see its
// documentation): capacity burst (WithBurst, default Rate.Limit), Rate.Limit
// tokens back per Rate.Period, denied requests take nothing, a cost above
// the burst is floodgate.ErrCostExceedsLimit. WithIntervalRefill makes the
// whole Rate.Limit come back at once each period instead, as
// floodgate.WithIntervalRefill does.
//
// The state is GCRA's theoretical arrival time in one string key per client
// (see the key layout in the package documentation), kept exactly as
// integer microseconds plus a fraction of Rate.Limit: no rounding
// accumulates however the period divides. At microsecond-aligned times a
// decision equals the in-memory bucket's, with RetryAfter and ResetAfter
// rounded up to the microsecond. An intervally refilled bucket keeps the
// start of its current period and the tokens used in it instead, in a key
// of its own. Each decision is one EVALSHA; the key expires when the
// bucket is full again.
//
// A TokenBucket is safe for concurrent use.
type TokenBucket struct {
	base
	interval bool // WithIntervalRefill
}

// tbParams is a token bucket's rate as its scripts take it.
type tbParams struct {
	rate   floodgate.Rate
	burst  int
	limit  uint64 // Rate.Limit
	period uint64 // Rate.Period in microseconds
	// Script arguments: tau = burst·Period/Limit as whole microseconds
	// and remainder, Limit, the burst and the period; and the cost of one
	// token, Period/Limit, likewise, so that the commonest decision
	// formats no number.
	tauQ, tauR, limitArg, burstArg, periodArg string
	oneQ, oneR                                string
}

// NewTokenBucket returns a token bucket on Redis refilling r.Limit tokens
// per r.Period, running its script through c. It accepts WithBurst,
// WithIntervalRefill, WithPrefix, WithClock, WithTimeout, WithFallback,
// WithProbeInterval, WithDenyCache, WithMaxKeyLength, WithMaxDebt and
// WithRateRefresh. The period must be a whole number of microseconds,
// the resolution of the Redis state, and burst·Period/Limit at most 2^50
// µs (35 years), which also keeps the ceil(burst/Limit) periods an
// interval bucket may wait below 2^51 µs.
func NewTokenBucket(c Scripter, r floodgate.Rate, opts ...Option) (*TokenBucket, error) {
	if err := checkRate(r); err != nil {
		return nil, err
	}
	cfg, err := newConfig(kindTokenBucket, opts)
	if err != nil {
		return nil, err
	}
	burst := r.Limit
	if cfg.burstSet {
		burst = cfg.burst
	}
	b := &TokenBucket{interval: cfg.interval}
	if err = b.init(c, cfg); err != nil {
		return nil, err
	}
	kind := "tb"
	if b.interval {
		kind = "tbi"
	}
	if err := b.initRates(kind, paramsOf(r, burst), cfg, compileTB); err != nil {
		return nil, err
	}
	b.setupLease(cfg)
	return b, nil
}

// paramsOf returns r and burst as the rate record keeps them.
func paramsOf(r floodgate.Rate, burst int) rateParams {
	return rateParams{limit: int64(r.Limit), period: int64(r.Period / time.Microsecond), burst: int64(burst)}
}

// rateOf returns the Rate of p.
func (p rateParams) rateOf() floodgate.Rate {
	return floodgate.Rate{Limit: int(p.limit), Period: time.Duration(p.period) * time.Microsecond}
}

// compileTB checks a token bucket's rate and returns its parameters.
func compileTB(rp rateParams) (any, error) {
	r, burst := rp.rateOf(), int(rp.burst)
	if err := checkRate(r); err != nil {
		return nil, err
	}
	if burst <= 0 || burst > maxLimit {
		return nil, fmt.Errorf("%w: burst %d must be in 1..%d", floodgate.ErrInvalidOption, burst, maxLimit)
	}
	p := &tbParams{rate: r, burst: burst, limit: uint64(r.Limit), period: uint64(rp.period)}
	hi, lo := bits.Mul64(uint64(burst), p.period)
	if hi >= p.limit {
		return nil, fmt.Errorf("%w: burst %d at %s is too long a horizon", floodgate.ErrInvalidRate, burst, r)
	}
	q, rem := bits.Div64(hi, lo, p.limit)
	if q >= maxHorizon {
		return nil, fmt.Errorf("%w: burst %d at %s is too long a horizon for Redis (at most 2^50 us)", floodgate.ErrInvalidRate, burst, r)
	}
	p.tauQ = strconv.FormatUint(q, 10)
	p.tauR = strconv.FormatUint(rem, 10)
	p.limitArg = strconv.FormatUint(p.limit, 10)
	p.burstArg = strconv.Itoa(burst)
	p.periodArg = strconv.FormatUint(p.period, 10)
	p.oneQ, p.oneR = p.inc(1)
	return p, nil
}

// inc returns n·Period/Limit as the decision script's incq and incr. n is
// at most the burst, so the quotient is at most tau and the division
// cannot overflow (checked in compileTB).
func (p *tbParams) inc(n int) (q, r string) {
	if n == 1 && p.oneQ != "" {
		return p.oneQ, p.oneR
	}
	hi, lo := bits.Mul64(uint64(n), p.period)
	incQ, incR := bits.Div64(hi, lo, p.limit)
	return strconv.FormatUint(incQ, 10), strconv.FormatUint(incR, 10)
}

// checkRate validates r as floodgate does and adds the Redis limiters'
// resolution: whole microseconds.
func checkRate(r floodgate.Rate) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Period%time.Microsecond != 0 {
		return fmt.Errorf("%w: period %s is not a whole number of microseconds", floodgate.ErrInvalidRate, r.Period)
	}
	if r.Period/time.Microsecond >= maxHorizon {
		return fmt.Errorf("%w: period %s is too long for Redis (at most 2^50 us)", floodgate.ErrInvalidRate, r.Period)
	}
	return nil
}

// params returns the parameters of the rate the bucket decides under.
func (b *TokenBucket) params() *tbParams { return b.rates.view.Load().alg.(*tbParams) }

// Rate returns the rate the bucket decides under: the one it was created
// with, or the one the rate record in Redis holds since it was last read
// (see SetRate).
func (b *TokenBucket) Rate() floodgate.Rate { return b.params().rate }

// Burst returns the capacity of each bucket, under the same rate.
func (b *TokenBucket) Burst() int { return b.params().burst }

// Allow is AllowN(ctx, key, 1).
func (b *TokenBucket) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return b.AllowN(ctx, key, 1)
}

// AllowN takes n tokens from key's bucket if it holds n, and reports the
// decision either way; n == 0 reports without taking. A cost above the
// burst returns floodgate.ErrCostExceedsLimit, under the rate record as
// read after the call began: another instance may have raised the rate,
// and decided this key under the raise, within this one's refresh
// interval (WithRateRefresh). That read is the only round trip such a
// call makes, and the calls waiting for one share it. Errors of the
// round trip wrap ErrRedis (unless a fallback answered).
func (b *TokenBucket) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if limit, err := b.checkCostNow(n); err != nil {
		return floodgate.Decision{Limit: limit}, err
	}
	if b.lease != nil {
		return b.allowLeased(ctx, key, n)
	}
	return b.decide(ctx, key, n, b.eval)
}

// SetRate makes every instance of the bucket, every process using its
// prefix on this Redis, decide under a new rate and burst, converting
// each key's bucket as c.Inherit says, as floodgate.TokenBucket.SetRate
// does in memory. The rate is kept in Redis beside the buckets (see the
// package documentation): SetRate writes it, then waits the rate refresh
// interval (WithRateRefresh, DefaultRateRefresh) so that every instance
// has read it before it returns. Each key is converted at its first
// decision after the change, as of the change's time, from the rate it
// was last decided under.
//
// The write has the caller's deadline (ctx), not the decision timeout
// (WithTimeout), and its outcome is always told apart:
//   - nil: the change is made, and every instance decides under it.
//   - the constructor's errors: an invalid change, refused before
//     anything is written.
//   - an error wrapping ErrRedis and ErrRateUnconfirmed: no reply came
//     (the connection failed, or ctx was done first); the change may or
//     may not be made. Call SetRate again with the same RateChange to
//     settle it: the change carries a number of its own and is made once,
//     never twice.
//   - an error wrapping ErrRedis alone: Redis answered and the change is
//     made, on the master at least (ErrNotReplicated), or the record it
//     replied with cannot be taken.
//   - an error wrapping ctx's error alone: the change is made, but ctx
//     was done during the wait; the other instances learn it within the
//     interval.
//
// The fallback (WithFallback) keeps its own rate.
func (b *TokenBucket) SetRate(ctx context.Context, c floodgate.RateChange) error {
	if err := checkRate(c.Rate); err != nil {
		return err
	}
	burst := c.Rate.Limit
	switch {
	case c.Burst < 0 || c.Burst > maxLimit:
		return fmt.Errorf("%w: burst %d must be in 1..%d", floodgate.ErrInvalidOption, c.Burst, maxLimit)
	case c.Burst > 0:
		burst = c.Burst
	}
	if c.Inherit < floodgate.KeepUsed || c.Inherit > floodgate.StartFresh {
		return fmt.Errorf("%w: unknown inheritance strategy %d", floodgate.ErrInvalidOption, int(c.Inherit))
	}
	return b.setRate(ctx, paramsOf(c.Rate, burst), c.Inherit)
}

// Reset refills key's bucket.
func (b *TokenBucket) Reset(ctx context.Context, key string) error {
	if b.lease != nil {
		return b.resetLease(ctx, key, b.leaseKeys(key))
	}
	return b.reset(ctx, key, []string{b.key(key)})
}

// RefundN gives back n tokens that an allowed AllowN took from key's
// bucket, as floodgate.TokenBucket.RefundN does: the theoretical arrival
// time moves back by n·Period/Limit, but never below now, so a bucket never
// holds more than its burst; a full bucket's key is deleted. floodgate.All
// uses it to undo a partial consumption. A negative n returns
// floodgate.ErrInvalidCost. The refund goes to Redis only, never to the
// fallback.
func (b *TokenBucket) RefundN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: refund of n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	if b.lease != nil {
		return b.refundLease(ctx, key, n)
	}
	return b.refund(ctx, key, func(ctx context.Context, now string) error {
		return b.refundRated(ctx, []string{b.key(key)}, now, func(v *rateView) (*script, []string) {
			p := v.alg.(*tbParams)
			if b.interval {
				return intervalRefundScript, []string{now, strconv.Itoa(n), p.limitArg, p.periodArg, v.minTTL, v.ver, v.suffix}
			}
			// More than the burst fills the bucket all the same.
			hi, lo := bits.Mul64(uint64(min(n, p.burst)), p.period)
			decQ, decR := bits.Div64(hi, lo, p.limit)
			return tokenBucketRefundScript, []string{now, strconv.FormatUint(decQ, 10), strconv.FormatUint(decR, 10),
				p.limitArg, v.minTTL, v.ver, v.suffix}
		}, b.eval, key)
	})
}

// Namespace reports where the bucket keeps its clients' state, the
// pattern of its keys (`redis keys "p:{*}:tb"`, or ":tbi" with
// WithIntervalRefill): floodgate's selectors, route tables and All refuse
// two limits of one namespace, which would count in one state. It makes
// the bucket a floodgate.Namespacer. The Redis server is not part of it:
// two buckets with one prefix on different servers are refused too, as
// this one cannot tell whether two clients reach one server.
func (b *TokenBucket) Namespace() string { return keySpace(b.key("*")) }

// key returns the bucket's one key: p:{k}:tb, or p:{k}:tbi when refilled
// intervally, so that neither mode reads the other's state.
func (b *TokenBucket) key(key string) string {
	if b.interval {
		return clientKey(b.prefix, key, "tbi")
	}
	return clientKey(b.prefix, key, "tb")
}

// AllowPlanN is AllowN for a floodgate.PlanLimiter, which calls it on the
// bucket of key's plan, every plan's bucket on one prefix (see
// floodgate.PlanLimiter): the bucket it writes carries this bucket's rate
// and burst, and a bucket last written under another plan's is first
// converted, as of now, as how says, KeepUsed or ScaleUsed
// (PlanConfig.Inherit), with the arithmetic of SetRate: under KeepUsed an
// upgrade gives the difference at once, as in memory. With WithLease it
// is AllowN: the leased bucket is read under the new plan as it stands.
func (b *TokenBucket) AllowPlanN(ctx context.Context, key string, n int, how floodgate.Inherit) (floodgate.Decision, error) {
	m, err := planModeOf(how)
	limit := b.limit()
	if err == nil {
		limit, err = b.checkCostNow(n)
	}
	switch {
	case err != nil:
		return floodgate.Decision{Limit: limit}, err
	case b.lease != nil:
		return b.allowLeased(ctx, key, n)
	case m == planScale:
		return b.decide(ctx, key, n, b.evalPlanScale)
	}
	return b.decide(ctx, key, n, b.evalPlanKeep)
}

func (b *TokenBucket) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return b.evalMode(ctx, key, n, now, plainMode)
}

func (b *TokenBucket) evalPlanKeep(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return b.evalMode(ctx, key, n, now, planKeep)
}

func (b *TokenBucket) evalPlanScale(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return b.evalMode(ctx, key, n, now, planScale)
}

// evalMode decides key's bucket in mode m (see planMode).
func (b *TokenBucket) evalMode(ctx context.Context, key string, n int, now string, m planMode) (floodgate.Decision, error) {
	if b.interval {
		return b.evalInterval(ctx, key, n, now, m)
	}
	return b.evalRated(ctx, []string{b.key(key)}, n, m, ratedScript{build: func(v *rateView, conv conversion) (*script, []string) {
		p := v.alg.(*tbParams)
		incQ, incR := p.inc(n)
		if m == plainMode && conv == (conversion{}) {
			// A plain decision under version 0 stamps no rate and so
			// converts nothing: the script takes the six arguments it is
			// not sent as "" (tokenbucket.lua), and the server makes six
			// strings fewer; on the server's clock two more, the floor
			// and the version, both "0", which the script takes as "0".
			if v.minTTL == "0" && v.ver == "0" {
				return tokenBucketScript, []string{now, strconv.Itoa(n), incQ, incR, p.tauQ, p.tauR, p.limitArg}
			}
			return tokenBucketScript, []string{now, strconv.Itoa(n), incQ, incR, p.tauQ, p.tauR, p.limitArg, v.minTTL, v.ver}
		}
		return tokenBucketScript, []string{now, strconv.Itoa(n), incQ, incR, p.tauQ, p.tauR, p.limitArg, v.minTTL, v.ver,
			conv.suffix, conv.expect, conv.with, p.periodArg, p.burstArg, m.arg()}
	}, convert: b.convertGreedy, want: 5, read: b.greedyDecision})
}

// greedyDecision reads a greedy bucket's reply.
func (b *TokenBucket) greedyDecision(v *rateView, r []int64, _ int) (floodgate.Decision, error) {
	p := v.alg.(*tbParams)
	owed, frac := r[1], r[2]
	d := floodgate.Decision{Allowed: r[0] == 1, Limit: p.burst}
	d.Remaining = max(p.burst-p.tokensCeil(owed, frac), 0)
	d.ResetAfter = ceilDuration(owed, frac)
	if !d.Allowed {
		wait, wfrac := r[3], r[4]
		if wfrac < 0 {
			wait, wfrac = wait-1, wfrac+int64(p.limit)
		}
		d.RetryAfter = ceilDuration(wait, wfrac)
	}
	return d, nil
}

// evalInterval decides for an intervally refilled bucket. The script
// rolls the period over and counts; Remaining, RetryAfter and ResetAfter
// are derived here as floodgate.TokenBucket derives them in memory: the
// request fits once enough whole periods have each given Limit back.
func (b *TokenBucket) evalInterval(ctx context.Context, key string, n int, now string, m planMode) (floodgate.Decision, error) {
	return b.evalRated(ctx, []string{b.key(key)}, n, m, ratedScript{build: func(v *rateView, conv conversion) (*script, []string) {
		p := v.alg.(*tbParams)
		return intervalScript, []string{now, strconv.Itoa(n), p.burstArg, p.limitArg, p.periodArg, v.minTTL,
			v.ver, conv.suffix, conv.expect, conv.with, m.arg()}
	}, convert: b.convertInterval, want: 4, read: func(v *rateView, r []int64, n int) (floodgate.Decision, error) {
		return v.alg.(*tbParams).intervalDecision(r[1:], n, r[0] == 1)
	}})
}

// intervalDecision derives the Decision of an intervally refilled bucket
// from the state a script replied with, {start, used, now}. used may
// exceed the burst when the bucket owes tokens charged or booked beyond
// it (ChargeN, ReserveN), or after a downgrade (SetRate).
func (p *tbParams) intervalDecision(r []int64, n int, allowed bool) (floodgate.Decision, error) {
	start, used, at := r[0], r[1], r[2]
	if used < 0 || used > p.maxUsed() || start < 0 || start >= maxMicros || at < 0 || at >= maxMicros {
		return floodgate.Decision{Limit: p.burst}, errBadReply(r)
	}
	limit, period := int64(p.limit), int64(p.period)
	d := floodgate.Decision{Allowed: allowed, Limit: p.burst, Remaining: max(p.burst-int(used), 0)}
	if used > 0 {
		d.ResetAfter = micros(start + (used+limit-1)/limit*period - at)
	}
	if !d.Allowed {
		k := (used + int64(n) - int64(p.burst) + limit - 1) / limit
		d.RetryAfter = micros(start + k*period - at)
	}
	return d, nil
}

// tokensCeil returns ceil((us + frac/Limit)·Limit/Period): the whole tokens
// that a debt of that many microseconds stands for.
func (p *tbParams) tokensCeil(us, frac int64) int {
	if us < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(us), p.limit)
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	if hi+carry >= p.period { // a debt far beyond the burst (ChargeN), or a corrupt reply
		return p.burst
	}
	q, r := bits.Div64(hi+carry, lo, p.period)
	if r > 0 {
		q++
	}
	return int(q)
}

// ceilDuration converts us + frac/Limit microseconds to a Duration rounded
// up to the microsecond, the resolution of the Redis state.
func ceilDuration(us, frac int64) time.Duration {
	if frac > 0 {
		us++
	}
	return micros(us)
}

// checkCost validates n against the largest cost the limiter can ever allow,
// with floodgate's sentinels.
func checkCost(n, max int) error {
	if n < 0 {
		return fmt.Errorf("%w: n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if n > max {
		return fmt.Errorf("%w: n = %d, limit %d", floodgate.ErrCostExceedsLimit, n, max)
	}
	return nil
}

// convertGreedy converts a greedy bucket's state, replied as
// {tat, frac, [lease mark,] v, L, P, B}, to v's rate as at says (see
// inherit.Greedy), and returns the converted state's numbers, "" for a
// full bucket.
func (b *TokenBucket) convertGreedy(v *rateView, st []int64, at convertAt) string {
	tat, frac := st[0], st[1]
	if tat < at.tc {
		return ""
	}
	from := v.rec.stateRate(st)
	q, r := inherit.Greedy(uint64(tat-at.tc), uint64(frac), from.bucket(), v.rec.rate.bucket(), at.how, maxHorizon)
	if q == 0 && r == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d", at.tc+int64(q), r)
}

// convertInterval converts an intervally refilled bucket's state,
// replied as {start, used, v, L, P, B}: it keeps the start of its
// current period as of at.tc, with its tokens used converted (see
// inherit.IntervalUsed).
func (b *TokenBucket) convertInterval(v *rateView, st []int64, at convertAt) string {
	from := v.rec.stateRate(st).interval()
	start, used := from.Roll(st[0], st[1], at.tc)
	u := inherit.IntervalUsed(uint64(used), from, v.rec.rate.interval(), at.how, maxHorizon)
	if u == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d", start, u)
}

func (p rateParams) bucket() inherit.Bucket {
	return inherit.Bucket{Limit: uint64(p.limit), Period: uint64(p.period), Burst: uint64(p.burst)}
}

func (p rateParams) interval() inherit.Interval {
	return inherit.Interval{Limit: uint64(p.limit), Period: uint64(p.period), Burst: uint64(p.burst)}
}
