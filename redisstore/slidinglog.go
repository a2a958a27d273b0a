package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
)

// SlidingLog is a sliding-log limiter whose logs live in Redis, so that
// every instance of a service shares them. It makes the decisions
// floodgate.SlidingLog makes in memory: at most Rate.Limit units in any
// window of Rate.Period ending now, exactly; denied attempts are not
// recorded unless WithCountDenied says so; a cost above Rate.Limit is
// floodgate.ErrCostExceedsLimit.
//
// Each client's log is one sorted set with one entry per recorded
// decision, scored by its time in integer microseconds and named by the
// running total of the units recorded up to it, plus a mark of the total
// below which units no longer count. The units the log counts are then
// one subtraction, where the aged entries end is one ZCOUNT, and the entry
// at which a denied request fits is a binary search over ranks, as in
// memory. So every decision, allowed or denied, whatever its cost n and
// however full the log, does O(log² N) work in Redis for the N entries of
// its key, plus the removal of at most 16 dead entries (a log whose
// entries are all dead is unlinked, freed off the server's main thread).
// A refund removes the entries it empties, each once in its life. Entries
// weigh at least one unit and a log holds at most Rate.Limit units, so at
// most Rate.Limit live entries: about 13 bytes each in Redis up to 128
// entries (a listpack), 95 beyond (MEMORY USAGE, Redis 7.0), 6 MiB for one
// key at the largest limit (floodgate.MaxSlidingLogLimit) in the worst
// case, a key that spends its quota one unit per microsecond. The key
// expires when the newest entry leaves the window. Each decision is one
// EVALSHA.
//
// A SlidingLog is safe for concurrent use.
type SlidingLog struct {
	base
	countDenied string // "1" to record denied attempts
}

// slParams is a sliding log's rate as its script takes it.
type slParams struct {
	rate      floodgate.Rate
	limitArg  string
	periodArg string
}

// NewSlidingLog returns a sliding log on Redis allowing r.Limit units per
// r.Period (r.Limit at most floodgate.MaxSlidingLogLimit, as in memory:
// it bounds the entries of one key, and so a script's work and a key's
// memory), running its script through c. It accepts WithCountDenied,
// WithPrefix, WithClock, WithTimeout, WithFallback, WithProbeInterval,
// WithDenyCache (not together with WithCountDenied), WithMaxKeyLength,
// WithMaxDebt and WithRateRefresh. The period must be a whole number of microseconds.
func NewSlidingLog(c Scripter, r floodgate.Rate, opts ...Option) (*SlidingLog, error) {
	if _, err := compileSL(paramsOf(r, r.Limit)); err != nil {
		return nil, err
	}
	cfg, err := newConfig(kindSlidingLog, opts)
	if err != nil {
		return nil, err
	}
	l := &SlidingLog{}
	if cfg.countDenied {
		l.countDenied = "1"
	}
	if err = l.init(c, cfg); err != nil {
		return nil, err
	}
	if err := l.initRates("log", paramsOf(r, r.Limit), cfg, compileSL); err != nil {
		return nil, err
	}
	return l, nil
}

// compileSL checks a sliding log's rate and returns its parameters.
func compileSL(rp rateParams) (any, error) {
	r := rp.rateOf()
	if err := checkRate(r); err != nil {
		return nil, err
	}
	if r.Limit > floodgate.MaxSlidingLogLimit {
		return nil, fmt.Errorf("%w: a sliding log holds up to Limit entries per key, and %d is above floodgate.MaxSlidingLogLimit %d; "+
			"use a SlidingCounter or a TokenBucket for larger limits", floodgate.ErrInvalidRate, r.Limit, floodgate.MaxSlidingLogLimit)
	}
	return &slParams{rate: r, limitArg: strconv.Itoa(r.Limit), periodArg: strconv.FormatInt(rp.period, 10)}, nil
}

// params returns the parameters of the rate the log decides under.
func (l *SlidingLog) params() *slParams { return l.rates.view.Load().alg.(*slParams) }

// Rate returns the rate the log decides under: the one it was created
// with, or the one the rate record in Redis holds since it was last read
// (see SetRate).
func (l *SlidingLog) Rate() floodgate.Rate { return l.params().rate }

// Allow is AllowN(ctx, key, 1).
func (l *SlidingLog) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN records n events for key if the window has room for all n, and
// reports the decision either way; n == 0 reports without recording. A
// cost above Rate.Limit returns floodgate.ErrCostExceedsLimit, as
// TokenBucket.AllowN says. Errors of the round trip wrap ErrRedis (unless
// a fallback answered).
func (l *SlidingLog) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if limit, err := l.checkCostNow(n); err != nil {
		return floodgate.Decision{Limit: limit}, err
	}
	return l.decide(ctx, key, n, l.eval)
}

// SetRate makes every instance of the log decide under a new rate,
// converting each key's log as c.Inherit says, as
// floodgate.SlidingLog.SetRate does in memory (the script converts a
// log itself, at its first decision after the change); see
// TokenBucket.SetRate for how a change reaches every instance.
func (l *SlidingLog) SetRate(ctx context.Context, c floodgate.RateChange) error {
	if err := checkWindowChange(c); err != nil {
		return err
	}
	if _, err := compileSL(paramsOf(c.Rate, c.Rate.Limit)); err != nil {
		return err
	}
	return l.setRate(ctx, paramsOf(c.Rate, c.Rate.Limit), c.Inherit)
}

// checkWindowChange checks a change of a window limiter's rate.
func checkWindowChange(c floodgate.RateChange) error {
	if c.Inherit < floodgate.KeepUsed || c.Inherit > floodgate.StartFresh {
		return fmt.Errorf("%w: unknown inheritance strategy %d", floodgate.ErrInvalidOption, int(c.Inherit))
	}
	if c.Burst != 0 {
		return fmt.Errorf("%w: burst %d: a window limiter has no burst, its capacity is Rate.Limit", floodgate.ErrInvalidOption, c.Burst)
	}
	return checkRate(c.Rate)
}

// Reset empties key's log.
func (l *SlidingLog) Reset(ctx context.Context, key string) error {
	return l.reset(ctx, key, l.keys(key))
}

// RefundN takes the n newest units off key's log, giving back the units
// of an allowed AllowN whose event did not happen, as
// floodgate.SlidingLog.RefundN does, with the same caveat: if another event
// was recorded for the key in between, the refund takes that one's units
// instead. A negative n returns floodgate.ErrInvalidCost and n above
// Rate.Limit floodgate.ErrCostExceedsLimit. The refund goes to Redis only,
// never to the fallback.
func (l *SlidingLog) RefundN(ctx context.Context, key string, n int) error {
	if err := checkCost(n, l.params().rate.Limit); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return l.refund(ctx, key, func(ctx context.Context, now string) error {
		return l.refundRated(ctx, l.keys(key), now, func(v *rateView) (*script, []string) {
			p := v.alg.(*slParams)
			return slidingLogRefundScript, append([]string{now, strconv.Itoa(n), p.limitArg, p.periodArg, v.minTTL}, logRateArgs(v)...)
		}, l.eval, key)
	})
}

// Namespace reports where the log keeps its clients' state, the pattern
// of its keys (`redis keys "p:{*}:log"`), as TokenBucket.Namespace does.
// It makes the log a floodgate.Namespacer.
func (l *SlidingLog) Namespace() string { return keySpace(l.keys("*")[0]) }

// keys returns the log's one key.
func (l *SlidingLog) keys(key string) []string {
	return []string{clientKey(l.prefix, key, "log")}
}

// logRateArgs returns the arguments of log_rate (prelude_log.lua).
func logRateArgs(v *rateView) []string {
	member := ""
	if v.rec.v > 0 {
		member = fmt.Sprintf("v %d %d %d", v.rec.v, v.rec.rate.limit, v.rec.rate.period)
	}
	return []string{v.ver, member, itoa(v.rec.tc), strconv.Itoa(int(v.rec.how)), itoa(v.rec.initial.limit), itoa(v.rec.initial.period)}
}

// AllowPlanN is AllowN for a floodgate.PlanLimiter, as
// TokenBucket.AllowPlanN: the log it writes names this log's rate, and a
// log last written under another plan's is first converted in the
// script, as of now, as how says (KeepUsed or ScaleUsed), as SetRate
// converts it.
func (l *SlidingLog) AllowPlanN(ctx context.Context, key string, n int, how floodgate.Inherit) (floodgate.Decision, error) {
	m, err := planModeOf(how)
	limit := l.limit()
	if err == nil {
		limit, err = l.checkCostNow(n)
	}
	switch {
	case err != nil:
		return floodgate.Decision{Limit: limit}, err
	case m == planScale:
		return l.decide(ctx, key, n, l.evalPlanScale)
	}
	return l.decide(ctx, key, n, l.evalPlanKeep)
}

func (l *SlidingLog) eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return l.evalMode(ctx, key, n, now, plainMode)
}

func (l *SlidingLog) evalPlanKeep(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return l.evalMode(ctx, key, n, now, planKeep)
}

func (l *SlidingLog) evalPlanScale(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
	return l.evalMode(ctx, key, n, now, planScale)
}

// evalMode decides key's log in mode m (see planMode): the script
// converts the log itself.
func (l *SlidingLog) evalMode(ctx context.Context, key string, n int, now string, m planMode) (floodgate.Decision, error) {
	return l.evalRated(ctx, l.keys(key), n, m, ratedScript{build: func(v *rateView, _ conversion) (*script, []string) {
		p := v.alg.(*slParams)
		args := make([]string, 0, 14) // 12, the plan's strategy and the debt's bound
		args = append(args, now, strconv.Itoa(n), p.limitArg, p.periodArg, l.countDenied, v.minTTL)
		args = append(args, logRateArgs(v)...)
		if m != plainMode {
			// The plan's rate named on version 0 too.
			args[7] = fmt.Sprintf("v %d %d %d", v.rec.v, v.rec.rate.limit, v.rec.rate.period)
		}
		return slidingLogScript, append(args, m.arg(), logDebtMost(l.debtCap(p)))
	}, want: 4, read: l.decision})
}

// decision reads the log's reply.
func (l *SlidingLog) decision(v *rateView, r []int64, _ int) (floodgate.Decision, error) {
	limit := v.alg.(*slParams).rate.Limit
	d := floodgate.Decision{
		Allowed:    r[0] == 1,
		Limit:      limit,
		Remaining:  max(limit-int(r[1]), 0),
		ResetAfter: micros(r[3]),
	}
	if !d.Allowed {
		d.RetryAfter = micros(r[2])
	}
	return d, nil
}

// micros converts a non-negative count of microseconds from a script to a
// Duration.
func micros(us int64) time.Duration {
	if us < 0 {
		return 0
	}
	if us >= maxMicros*2 {
		us = maxMicros * 2
	}
	return time.Duration(us) * time.Microsecond
}
