package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/estimate"
)

// SlidingCounter is a sliding-window counter whose counts live in Redis, so
// that every instance of a service shares them. It makes the decisions
// floodgate.SlidingCounter makes in memory, with the same estimate and
// error bound (see its documentation): fixed windows of Rate.Period, the
// previous window's count weighted by the share of it still inside the
// sliding window, a denied request counts nothing, a cost above Rate.Limit
// is floodgate.ErrCostExceedsLimit.
//
// Each client has one key (see the key layout in the package
// documentation) holding the current window's number and count and the
// previous window's count, expiring when they stop weighing on the
// estimate. Windows are aligned on the Unix epoch, so every instance cuts
// time the same way; with WithClock they are aligned on the limiter's
// creation instead, as in memory. The script checks and counts in one
// EVALSHA.
//
// A SlidingCounter is safe for concurrent use.
type SlidingCounter struct {
	base
	rate      floodgate.Rate
	period    int64            // Rate.Period in ns
	est       estimate.Counter // the same arithmetic as in memory
	limitArg  string
	periodArg string
	originArg string
}

// NewSlidingCounter returns a sliding-window counter on Redis allowing
// about r.Limit events per r.Period, running its script through c. It
// accepts WithPrefix, WithClock, WithTimeout, WithFallback,
// WithProbeInterval, WithDenyCache and WithMaxKeyLength. The period must be
// a whole number of microseconds.
func NewSlidingCounter(c Scripter, r floodgate.Rate, opts ...Option) (*SlidingCounter, error) {
	if err := checkRate(r); err != nil {
		return nil, err
	}
	cfg, err := newConfig(kindCounter, opts)
	if err != nil {
		return nil, err
	}
	sc := &SlidingCounter{
		rate:      r,
		period:    int64(r.Period),
		est:       estimate.Counter{Limit: uint32(r.Limit), Period: int64(r.Period)},
		limitArg:  strconv.Itoa(r.Limit),
		periodArg: strconv.FormatInt(int64(r.Period/time.Microsecond), 10),
		originArg: "0",
	}
	if err = sc.init(c, r.Limit, cfg); err != nil {
		return nil, err
	}
	sc.setupLease(cfg)
	if cfg.now != nil {
		_, origin, err := sc.clock()
		if err != nil {
			return nil, err
		}
		sc.originArg = origin
	}
	return sc, nil
}

// Rate returns the rate the counter was created with.
func (sc *SlidingCounter) Rate() floodgate.Rate { return sc.rate }

// Allow is AllowN(ctx, key, 1).
func (sc *SlidingCounter) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return sc.AllowN(ctx, key, 1)
}

// AllowN counts n events for key if the estimated count in the Period
// ending now leaves room for them, and reports the decision either way;
// n == 0 reports without counting. A cost above Rate.Limit returns
// floodgate.ErrCostExceedsLimit without a round trip. Errors of the round
// trip wrap ErrRedis (unless a fallback answered).
func (sc *SlidingCounter) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if err := checkCost(n, sc.rate.Limit); err != nil {
		return floodgate.Decision{Limit: sc.rate.Limit}, err
	}
	if sc.lease != nil {
		return sc.allowLeased(ctx, key, n)
	}
	return sc.decide(ctx, key, n, sc.eval)
}

// Reset forgets key's counts.
func (sc *SlidingCounter) Reset(ctx context.Context, key string) error {
	if sc.lease != nil {
		return sc.resetLease(ctx, key, sc.leaseKeys(key))
	}
	return sc.reset(ctx, key, sc.keys(key))
}

// RefundN uncounts n events of key, as floodgate.SlidingCounter.RefundN
// does: from the current fixed window and, if that holds fewer, from the
// previous one. A negative n returns floodgate.ErrInvalidCost and n above
// Rate.Limit floodgate.ErrCostExceedsLimit. The refund goes to Redis only,
// never to the fallback.
func (sc *SlidingCounter) RefundN(ctx context.Context, key string, n int) error {
	if err := checkCost(n, sc.rate.Limit); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if sc.lease != nil {
		return sc.refundLease(ctx, key, n)
	}
	return sc.refund(ctx, key, func(ctx context.Context, now string) error {
		_, err := slidingCounterRefundScript.run(ctx, sc.client, sc.keys(key),
			[]string{now, strconv.Itoa(n), sc.limitArg, sc.periodArg, sc.originArg, sc.minTTL})
		return err
	})
}

// Namespace reports where the counter keeps its clients' state, the
// pattern of its keys (`redis keys "p:{*}:sc"`), as TokenBucket.Namespace
// does. It makes the counter a floodgate.Namespacer.
func (sc *SlidingCounter) Namespace() string { return keySpace(sc.keys("*")[0]) }

// keys returns the counter's one key.
func (sc *SlidingCounter) keys(key string) []string {
	return []string{clientTag(sc.prefix, key) + "sc"}
}

func (sc *SlidingCounter) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	args := []string{now, strconv.Itoa(n), sc.limitArg, sc.periodArg, sc.originArg, sc.minTTL}
	r, unrepl, err := sc.reply(ctx, slidingCounterScript, sc.keys(key), args, 4)
	if err != nil {
		return floodgate.Decision{Limit: sc.rate.Limit}, err
	}
	limit := sc.rate.Limit
	// A count may exceed the limit in debt (ChargeN), up to maxCount.
	if r[1] < 0 || r[2] < 0 || r[1] > maxCount || r[2] > maxCount || r[3] < 0 || r[3] >= maxMicros {
		return floodgate.Decision{Limit: limit}, errBadReply(r)
	}
	prev, cur := uint32(r[1]), uint32(r[2])
	// The same arithmetic as the in-memory counter, in nanoseconds; the
	// waits are then rounded up to the microsecond.
	now64 := r[3] * 1000
	start := now64 / sc.period * sc.period
	elapsed := now64 - start
	d := floodgate.Decision{Allowed: r[0] == 1, Limit: limit}
	d.Remaining = max(limit-int(cur)-int(sc.est.Share(prev, sc.period-elapsed)), 0)
	switch {
	case cur > 0:
		d.ResetAfter = ceilMicros(start + 2*sc.period - now64)
	case prev > 0:
		d.ResetAfter = ceilMicros(start + sc.period - now64)
	}
	if !d.Allowed {
		d.RetryAfter = ceilMicros(sc.est.RetryAt(start, prev, cur, uint32(n)) - now64)
	}
	return d, replicated(d, n, unrepl)
}

// ceilMicros rounds a non-negative wait in nanoseconds up to the
// microsecond, the resolution every Redis limiter reports in.
func ceilMicros(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration((ns + 999) / 1000 * 1000)
}
