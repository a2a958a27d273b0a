package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/estimate"
)

// SlidingCounter is a sliding-window counter whose counts live in Redis, so
// that every instance of a service shares them. It makes the decisions
// floodgate.SlidingCounter makes in memory, step for step on an injected
// clock (WithClock; see below for the windows on the server's clock),
// with the same estimate and error bound (see its documentation): fixed windows of Rate.Period, the
// previous window's count weighted by the share of it still inside the
// sliding window, a denied request counts nothing, a cost above Rate.Limit
// is floodgate.ErrCostExceedsLimit.
//
// Each client has one key (see the key layout in the package
// documentation) holding the current window's number and count and the
// previous window's count, expiring when they stop weighing on the
// estimate. Windows are aligned on the Unix epoch, so every instance cuts
// time the same way; with WithClock they are aligned on the limiter's
// creation instead, as in memory. Only then, on an injected clock, do
// the two counters decide step for step alike: on the server's clock
// their windows start at different instants (unless the in-memory
// counter happened to be created on a multiple of the period since the
// epoch), and a request near a window's end may be allowed by one and
// denied by the other, each within the counter's error bound. The script checks and counts in one
// EVALSHA.
//
// A SlidingCounter is safe for concurrent use.
type SlidingCounter struct {
	base
	originArg string
	origin    int64 // µs: windows are counted from it
}

// scParams is a sliding counter's rate as its script takes it.
type scParams struct {
	rate      floodgate.Rate
	period    int64            // Rate.Period in ns
	est       estimate.Counter // the same arithmetic as in memory
	limitArg  string
	periodArg string
}

// NewSlidingCounter returns a sliding-window counter on Redis allowing
// about r.Limit events per r.Period, running its script through c. It
// accepts WithPrefix, WithClock, WithTimeout, WithFallback,
// WithProbeInterval, WithDenyCache, WithMaxKeyLength, WithMaxDebt and
// WithRateRefresh. The period must be a whole number of microseconds.
func NewSlidingCounter(c Scripter, r floodgate.Rate, opts ...Option) (*SlidingCounter, error) {
	if err := checkRate(r); err != nil {
		return nil, err
	}
	cfg, err := newConfig(kindCounter, opts)
	if err != nil {
		return nil, err
	}
	sc := &SlidingCounter{originArg: "0"}
	if err = sc.init(c, cfg); err != nil {
		return nil, err
	}
	if err := sc.initRates("sc", paramsOf(r, r.Limit), cfg, compileSC); err != nil {
		return nil, err
	}
	sc.setupLease(cfg)
	if cfg.now != nil {
		_, origin, err := sc.clock()
		if err != nil {
			return nil, err
		}
		sc.originArg = origin
		sc.origin, _ = strconv.ParseInt(origin, 10, 64)
	}
	return sc, nil
}

// compileSC checks a sliding counter's rate and returns its parameters.
func compileSC(rp rateParams) (any, error) {
	r := rp.rateOf()
	if err := checkRate(r); err != nil {
		return nil, err
	}
	return &scParams{
		rate:      r,
		period:    int64(r.Period),
		est:       estimate.Counter{Limit: uint32(r.Limit), Period: int64(r.Period)},
		limitArg:  strconv.Itoa(r.Limit),
		periodArg: strconv.FormatInt(rp.period, 10),
	}, nil
}

// params returns the parameters of the rate the counter decides under.
func (sc *SlidingCounter) params() *scParams { return sc.rates.view.Load().alg.(*scParams) }

// Rate returns the rate the counter decides under: the one it was created
// with, or the one the rate record in Redis holds since it was last read
// (see SetRate).
func (sc *SlidingCounter) Rate() floodgate.Rate { return sc.params().rate }

// Allow is AllowN(ctx, key, 1).
func (sc *SlidingCounter) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return sc.AllowN(ctx, key, 1)
}

// AllowN counts n events for key if the estimated count in the Period
// ending now leaves room for them, and reports the decision either way;
// n == 0 reports without counting. A cost above Rate.Limit returns
// floodgate.ErrCostExceedsLimit, as TokenBucket.AllowN says. Errors of
// the round trip wrap ErrRedis (unless a fallback answered).
func (sc *SlidingCounter) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if limit, err := sc.checkCostNow(n); err != nil {
		return floodgate.Decision{Limit: limit}, err
	}
	if sc.lease != nil {
		return sc.allowLeased(ctx, key, n)
	}
	return sc.decide(ctx, key, n, sc.eval)
}

// SetRate makes every instance of the counter decide under a new rate,
// converting each key's counts as c.Inherit says, as
// floodgate.SlidingCounter.SetRate does in memory; see
// TokenBucket.SetRate for how a change reaches every instance.
func (sc *SlidingCounter) SetRate(ctx context.Context, c floodgate.RateChange) error {
	if err := checkWindowChange(c); err != nil {
		return err
	}
	return sc.setRate(ctx, paramsOf(c.Rate, c.Rate.Limit), c.Inherit)
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
	if err := checkCost(n, sc.params().rate.Limit); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if sc.lease != nil {
		return sc.refundLease(ctx, key, n)
	}
	return sc.refund(ctx, key, func(ctx context.Context, now string) error {
		return sc.refundRated(ctx, sc.keys(key), now, func(v *rateView) (*script, []string) {
			p := v.alg.(*scParams)
			return slidingCounterRefundScript, []string{now, strconv.Itoa(n), p.limitArg, p.periodArg, sc.originArg, v.minTTL, v.ver, v.suffix}
		}, sc.eval, key)
	})
}

// Namespace reports where the counter keeps its clients' state, the
// pattern of its keys (`redis keys "p:{*}:sc"`), as TokenBucket.Namespace
// does. It makes the counter a floodgate.Namespacer.
func (sc *SlidingCounter) Namespace() string { return keySpace(sc.keys("*")[0]) }

// keys returns the counter's one key.
func (sc *SlidingCounter) keys(key string) []string {
	return []string{clientKey(sc.prefix, key, "sc")}
}

// AllowPlanN is AllowN for a floodgate.PlanLimiter, as
// TokenBucket.AllowPlanN: the counts it writes carry this counter's rate,
// and counts last written under another plan's are first converted, as of
// now, as how says (KeepUsed or ScaleUsed), as SetRate converts them.
func (sc *SlidingCounter) AllowPlanN(ctx context.Context, key string, n int, how floodgate.Inherit) (floodgate.Decision, error) {
	m, err := planModeOf(how)
	limit := sc.limit()
	if err == nil {
		limit, err = sc.checkCostNow(n)
	}
	switch {
	case err != nil:
		return floodgate.Decision{Limit: limit}, err
	case sc.lease != nil:
		return sc.allowLeased(ctx, key, n)
	case m == planScale:
		return sc.decide(ctx, key, n, sc.evalPlanScale)
	}
	return sc.decide(ctx, key, n, sc.evalPlanKeep)
}

func (sc *SlidingCounter) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return sc.evalMode(ctx, key, n, now, plainMode)
}

func (sc *SlidingCounter) evalPlanKeep(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return sc.evalMode(ctx, key, n, now, planKeep)
}

func (sc *SlidingCounter) evalPlanScale(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return sc.evalMode(ctx, key, n, now, planScale)
}

// evalMode decides key's counts in mode m (see planMode).
func (sc *SlidingCounter) evalMode(ctx context.Context, key string, n int, now string, m planMode) (floodgate.Decision, error) {
	return sc.evalRated(ctx, sc.keys(key), n, m, ratedScript{build: func(v *rateView, conv conversion) (*script, []string) {
		p := v.alg.(*scParams)
		return slidingCounterScript, []string{now, strconv.Itoa(n), p.limitArg, p.periodArg, sc.originArg, v.minTTL,
			v.ver, conv.suffix, conv.expect, conv.with, m.arg()}
	}, convert: sc.convert, want: 5, read: sc.decision})
}

// decision reads the counter's reply.
func (sc *SlidingCounter) decision(v *rateView, r []int64, n int) (floodgate.Decision, error) {
	p := v.alg.(*scParams)
	limit := p.rate.Limit
	// A count may exceed the limit after a downgrade (SetRate), up to
	// maxCount.
	if r[1] < 0 || r[2] < 0 || r[1] > maxCount || r[2] > maxCount || r[3] < 0 || r[3] >= maxMicros || r[4] < 0 || r[4] > r[3] {
		return floodgate.Decision{Limit: limit}, errBadReply(r)
	}
	prev, cur := uint32(r[1]), uint32(r[2])
	// The same arithmetic as the in-memory counter, in nanoseconds; the
	// waits are then rounded up to the microsecond. The counts are as of
	// now64, the waits from real: a debt carried ahead (ChargeN) has the
	// counts of its last window, still to come, the windows before it
	// counting the limit.
	now64, real := r[3]*1000, r[4]*1000
	start := now64 / p.period * p.period
	elapsed := now64 - start
	d := floodgate.Decision{Allowed: r[0] == 1, Limit: limit}
	d.Remaining = max(limit-int(cur)-int(p.est.Share(prev, p.period-elapsed)), 0)
	switch {
	case cur > 0:
		d.ResetAfter = ceilMicros(start + 2*p.period - real)
	case prev > 0:
		d.ResetAfter = ceilMicros(start + p.period - real)
	}
	if !d.Allowed {
		d.RetryAfter = ceilMicros(p.est.RetryAt(start, prev, cur, uint32(n)) - real)
	}
	return d, nil
}

// ceilMicros rounds a non-negative wait in nanoseconds up to the
// microsecond, the resolution every Redis limiter reports in.
func ceilMicros(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration((ns + 999) / 1000 * 1000)
}

// convert converts a counter's state, replied as {w, prev, cur,
// [leased,] v, L, P, B}, to v's rate as at says (as of a change of rate,
// or of plan), as floodgate.SlidingCounter does in
// memory: with the period unchanged the counts stay in their windows,
// with a new one the units the estimate counts at the change become the
// count of the new period's current window.
func (sc *SlidingCounter) convert(v *rateView, st []int64, at convertAt) string {
	from, to := v.rec.stateRate(st), v.rec.rate
	how := at.how
	tc := at.tc - sc.origin
	w := tc / from.period
	var prev, cur uint64
	switch {
	case st[0] > w: // written after the change, by an instance that had not read it
		w, tc = st[0], st[0]*from.period
		prev, cur = uint64(st[1]), uint64(st[2])
	case st[0] == w:
		prev, cur = uint64(st[1]), uint64(st[2])
	case st[0] == w-1:
		prev = uint64(st[2])
	}
	if to.period != from.period {
		est := estimate.Counter{Limit: uint32(from.limit), Period: from.period}
		used := cur + uint64(est.Share(uint32(prev), from.period-(tc-w*from.period)))
		if u := how.Units(used, uint64(from.limit), uint64(to.limit)); u > 0 {
			return fmt.Sprintf("%d 0 %d", tc/to.period, u)
		}
		return ""
	}
	prev, cur = how.Counts(prev, cur, uint64(from.limit), uint64(to.limit))
	if prev+cur == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d %d", w, prev, cur)
}
