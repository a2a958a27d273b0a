package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/floodgate-go/floodgate"
)

// This file holds what the window limiters on Redis do for the admission
// kinds beyond a rate, as their in-memory twins do: charging beyond the
// limit (floodgate.Charger), for WithCostAfter.

// maxCount bounds a sliding counter's window count: 2^30, the in-memory
// counter's bound on a debt.
const maxCount = 1 << 30

var (
	//go:embed scripts/slidinglog_charge.lua
	slidingLogChargeSrc string
	//go:embed scripts/slidingcounter_charge.lua
	slidingCounterChargeSrc string

	slidingLogChargeScript     = newScript(prelude + preludeLog + slidingLogChargeSrc)
	slidingCounterChargeScript = newScript(prelude + preludeRate + preludeCounter + slidingCounterChargeSrc)
)

// ChargeN records n units for key whether or not the window has room for
// them (floodgate.Charger), as floodgate.SlidingLog.ChargeN does, with the
// same bounds: an entry weighs at most Rate.Limit units, and a log holding
// Rate.Limit entries is folded into one. n above 2^24 counts as 2^24. The
// charge goes to Redis only, never to the fallback.
func (l *SlidingLog) ChargeN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	return l.refund(ctx, key, func(ctx context.Context, now string) error {
		return l.refundRated(ctx, l.keys(key), now, func(v *rateView) (*script, []string) {
			p := v.alg.(*slParams)
			w := strconv.Itoa(min(n, p.rate.Limit))
			return slidingLogChargeScript, append([]string{now, w, p.limitArg, p.periodArg, l.minTTL}, logRateArgs(v)...)
		}, l.eval, key)
	})
}

// ChargeN counts n events for key whether or not the estimate has room for
// them (floodgate.Charger), as floodgate.SlidingCounter.ChargeN does: a
// window's count saturates at 2^30. n above 2^24 counts as 2^24. The
// charge goes to Redis only, never to the fallback. With leased quota
// (WithLease) it is an error wrapping floodgate.ErrInvalidOption, and
// Charges reports false.
func (sc *SlidingCounter) ChargeN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if sc.lease != nil {
		return errLeaseKinds
	}
	if n == 0 {
		return nil
	}
	c := strconv.Itoa(min(n, maxLimit))
	return sc.refund(ctx, key, func(ctx context.Context, now string) error {
		return sc.refundRated(ctx, sc.keys(key), now, func(v *rateView) (*script, []string) {
			p := v.alg.(*scParams)
			return slidingCounterChargeScript, []string{now, c, p.periodArg, sc.originArg, strconv.Itoa(maxCount), sc.minTTL, v.ver, v.suffix}
		}, sc.eval, key)
	})
}

// Charges reports whether ChargeN charges: not with leased quota
// (WithLease), so that floodgate.WithCostAfter refuses the counter at
// construction.
func (sc *SlidingCounter) Charges() bool { return sc.lease == nil }

var (
	_ floodgate.Charger = (*SlidingLog)(nil)
	_ floodgate.Charger = (*SlidingCounter)(nil)
)
