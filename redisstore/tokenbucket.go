package redisstore

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
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
	rate     floodgate.Rate
	burst    int
	interval bool   // WithIntervalRefill
	limit    uint64 // Rate.Limit
	period   uint64 // Rate.Period in microseconds
	// Script arguments that do not change: tau = burst·Period/Limit as
	// whole microseconds and remainder, Limit, the burst and the period.
	tauQ, tauR, limitArg, burstArg, periodArg string
}

// NewTokenBucket returns a token bucket on Redis refilling r.Limit tokens
// per r.Period, running its script through c. It accepts WithBurst,
// WithIntervalRefill, WithPrefix, WithClock, WithTimeout, WithFallback,
// WithProbeInterval, WithDenyCache and WithMaxKeyLength. The period must
// be a whole number of microseconds, the resolution of the Redis state,
// and burst·Period/Limit at most 2^50 µs (35 years), which also keeps the
// ceil(burst/Limit) periods an interval bucket may wait below 2^51 µs.
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
	b := &TokenBucket{
		rate:     r,
		burst:    burst,
		interval: cfg.interval,
		limit:    uint64(r.Limit),
		period:   uint64(r.Period / time.Microsecond),
	}
	hi, lo := bits.Mul64(uint64(burst), b.period)
	if hi >= b.limit {
		return nil, fmt.Errorf("%w: burst %d at %s is too long a horizon", floodgate.ErrInvalidRate, burst, r)
	}
	q, rem := bits.Div64(hi, lo, b.limit)
	if q >= maxHorizon {
		return nil, fmt.Errorf("%w: burst %d at %s is too long a horizon for Redis (at most 2^50 us)", floodgate.ErrInvalidRate, burst, r)
	}
	b.tauQ = strconv.FormatUint(q, 10)
	b.tauR = strconv.FormatUint(rem, 10)
	b.limitArg = strconv.FormatUint(b.limit, 10)
	b.burstArg = strconv.Itoa(burst)
	b.periodArg = strconv.FormatUint(b.period, 10)
	if err = b.init(c, burst, cfg); err != nil {
		return nil, err
	}
	b.setupLease(cfg)
	return b, nil
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

// Rate returns the rate the bucket was created with.
func (b *TokenBucket) Rate() floodgate.Rate { return b.rate }

// Burst returns the capacity of each bucket.
func (b *TokenBucket) Burst() int { return b.burst }

// Allow is AllowN(ctx, key, 1).
func (b *TokenBucket) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return b.AllowN(ctx, key, 1)
}

// AllowN takes n tokens from key's bucket if it holds n, and reports the
// decision either way; n == 0 reports without taking. A cost above the
// burst returns floodgate.ErrCostExceedsLimit without a round trip. Errors
// of the round trip wrap ErrRedis (unless a fallback answered).
func (b *TokenBucket) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if err := checkCost(n, b.burst); err != nil {
		return floodgate.Decision{Limit: b.burst}, err
	}
	if b.lease != nil {
		return b.allowLeased(ctx, key, n)
	}
	return b.decide(ctx, key, n, b.eval)
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
	if b.interval {
		return b.refund(ctx, key, func(ctx context.Context, now string) error {
			_, err := intervalRefundScript.run(ctx, b.client, []string{b.key(key)},
				[]string{now, strconv.Itoa(n), b.limitArg, b.periodArg, b.minTTL})
			return err
		})
	}
	// More than the burst fills the bucket all the same.
	hi, lo := bits.Mul64(uint64(min(n, b.burst)), b.period)
	decQ, decR := bits.Div64(hi, lo, b.limit)
	return b.refund(ctx, key, func(ctx context.Context, now string) error {
		_, err := tokenBucketRefundScript.run(ctx, b.client, []string{b.key(key)},
			[]string{now, strconv.FormatUint(decQ, 10), strconv.FormatUint(decR, 10), b.limitArg, b.minTTL})
		return err
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
		return clientTag(b.prefix, key) + "tbi"
	}
	return clientTag(b.prefix, key) + "tb"
}

func (b *TokenBucket) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	if b.interval {
		return b.evalInterval(ctx, key, n, now)
	}
	// n·Period/Limit: n <= burst, so the quotient is at most tau and the
	// division cannot overflow (checked in NewTokenBucket).
	hi, lo := bits.Mul64(uint64(n), b.period)
	incQ, incR := bits.Div64(hi, lo, b.limit)
	args := []string{now, strconv.Itoa(n),
		strconv.FormatUint(incQ, 10), strconv.FormatUint(incR, 10),
		b.tauQ, b.tauR, b.limitArg, b.minTTL}
	r, unrepl, err := b.reply(ctx, tokenBucketScript, []string{b.key(key)}, args, 5)
	if err != nil {
		return floodgate.Decision{Limit: b.burst}, err
	}
	owed, frac := r[1], r[2]
	d := floodgate.Decision{Allowed: r[0] == 1, Limit: b.burst}
	d.Remaining = b.burst - b.tokensCeil(owed, frac)
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	d.ResetAfter = ceilDuration(owed, frac)
	if !d.Allowed {
		wait, wfrac := r[3], r[4]
		if wfrac < 0 {
			wait, wfrac = wait-1, wfrac+int64(b.limit)
		}
		d.RetryAfter = ceilDuration(wait, wfrac)
	}
	return d, replicated(d, n, unrepl)
}

// evalInterval decides for an intervally refilled bucket. The script
// rolls the period over and counts; Remaining, RetryAfter and ResetAfter
// are derived here as floodgate.TokenBucket derives them in memory: the
// request fits once enough whole periods have each given Limit back.
func (b *TokenBucket) evalInterval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	args := []string{now, strconv.Itoa(n), b.burstArg, b.limitArg, b.periodArg, b.minTTL}
	r, unrepl, err := b.reply(ctx, intervalScript, []string{b.key(key)}, args, 4)
	if err != nil {
		return floodgate.Decision{Limit: b.burst}, err
	}
	d, err := b.intervalDecision(r[1:], n, r[0] == 1)
	if err != nil {
		return d, err
	}
	return d, replicated(d, n, unrepl)
}

// intervalDecision derives the Decision of an intervally refilled bucket
// from the state a script replied with, {start, used, now}. used may
// exceed the burst when the bucket owes tokens charged or booked beyond
// it (ChargeN, ReserveN).
func (b *TokenBucket) intervalDecision(r []int64, n int, allowed bool) (floodgate.Decision, error) {
	start, used, at := r[0], r[1], r[2]
	if used < 0 || used > b.maxUsed() || start < 0 || start >= maxMicros || at < 0 || at >= maxMicros {
		return floodgate.Decision{Limit: b.burst}, errBadReply(r)
	}
	limit, period := int64(b.limit), int64(b.period)
	d := floodgate.Decision{Allowed: allowed, Limit: b.burst, Remaining: max(b.burst-int(used), 0)}
	if used > 0 {
		d.ResetAfter = micros(start + (used+limit-1)/limit*period - at)
	}
	if !d.Allowed {
		k := (used + int64(n) - int64(b.burst) + limit - 1) / limit
		d.RetryAfter = micros(start + k*period - at)
	}
	return d, nil
}

// tokensCeil returns ceil((us + frac/Limit)·Limit/Period): the whole tokens
// that a debt of that many microseconds stands for.
func (b *TokenBucket) tokensCeil(us, frac int64) int {
	if us < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(us), b.limit)
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	if hi+carry >= b.period { // a debt far beyond the burst (ChargeN)
		return b.burst
	}
	q, r := bits.Div64(hi+carry, lo, b.period)
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
