package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/debtcap"
)

// This file holds what the window limiters on Redis do for the admission
// kinds beyond a rate, as their in-memory twins do: charging beyond the
// limit (floodgate.Charger), for WithCostAfter.

// maxCount bounds a sliding counter's window count: 2^30, as in memory
// (a count above the limit is left by a downgrade; a debt is carried
// into the windows after).
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
// them (floodgate.Charger), as floodgate.SlidingLog.ChargeN does: what the
// window has room for at now, the rest a debt carried into the coming
// windows, the limit to each, kept as one member of the log whatever it
// spans. The bounds are memory's: one charge at most PerCall's worth of
// units (WithMaxDebt; at least the limit, at most 2^24), a debt at most
// Total's (at least one window, at most 2^30 units), and a log that holds
// the limit of live entries (at least 2) folds into one before a debt is
// carried. A charge that reaches a bound is charged up to it and returns
// an error wrapping floodgate.ErrDebtCapped. The charge goes to Redis
// only, never to the fallback.
func (l *SlidingLog) ChargeN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if n == 0 {
		return nil
	}
	var capped bool
	err := l.refund(ctx, key, func(ctx context.Context, now string) error {
		r, err := l.repliedRated(ctx, l.keys(key), now, func(v *rateView) (*script, []string) {
			p := v.alg.(*slParams)
			c := l.debtCap(p)
			m := int(min(uint64(min(n, maxLimit)), c.PerCall))
			capped = m < n
			args := append([]string{now, strconv.Itoa(m), p.limitArg, p.periodArg, v.minTTL}, logRateArgs(v)...)
			return slidingLogChargeScript, append(args, logDebtMost(c))
		}, l.eval, key)
		capped = capped || err == nil && len(r) >= 2 && r[1] == 1
		return err
	})
	if err == nil && capped {
		return fmt.Errorf("%w: ChargeN(%d) on key %q", floodgate.ErrDebtCapped, n, key)
	}
	return err
}

// debtCap returns the log's debt limits at the rate of p.
func (l *SlidingLog) debtCap(p *slParams) debtcap.Cap {
	return debtcap.New(l.debt.PerCall, l.debt.Total, p.rate.Limit, p.rate.Period, p.rate.Limit)
}

// maxLogDebt bounds the units a log carries ahead: 2^30, as in memory.
const maxLogDebt = 1 << 30

// logDebtMost is the script argument of the most units a log carries
// ahead under c.
func logDebtMost(c debtcap.Cap) string {
	return strconv.FormatUint(min(c.Total, maxLogDebt), 10)
}

// ChargeN counts n events for key whether or not the estimate has room for
// them (floodgate.Charger), as floodgate.SlidingCounter.ChargeN does: the
// current window counts up to the limit and the rest is carried into the
// windows after it, the limit to each, with the same bounds (WithMaxDebt:
// one charge at most PerCall's worth of events, at least the limit, at
// most 2^24; a debt at most Total's windows ahead, at least one). A
// charge that reaches a bound is counted up to it and returns an error
// wrapping floodgate.ErrDebtCapped. The charge goes to Redis only, never
// to the fallback. With leased quota (WithLease) it is an error wrapping
// floodgate.ErrInvalidOption, and Charges reports false.
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
	var capped bool
	err := sc.refund(ctx, key, func(ctx context.Context, now string) error {
		r, err := sc.chargeRated(ctx, sc.keys(key), func(v *rateView, conv conversion) (*script, []string) {
			p := v.alg.(*scParams)
			c := debtcap.New(sc.debt.PerCall, sc.debt.Total, p.rate.Limit, p.rate.Period, p.rate.Limit)
			m := int(min(uint64(min(n, maxLimit)), c.PerCall))
			capped = m < n
			return slidingCounterChargeScript, []string{now, strconv.Itoa(m), p.periodArg, sc.originArg, strconv.Itoa(maxCount), v.minTTL,
				v.ver, conv.suffix, p.limitArg, strconv.FormatInt(c.Periods, 10), conv.expect, conv.with}
		}, sc.convert, 2)
		capped = capped || err == nil && len(r) >= 2 && r[1] == 1
		return err
	})
	if err == nil && capped {
		return fmt.Errorf("%w: ChargeN(%d) on key %q", floodgate.ErrDebtCapped, n, key)
	}
	return err
}

// Charges reports whether ChargeN charges: not with leased quota
// (WithLease), so that floodgate.WithCostAfter refuses the counter at
// construction.
func (sc *SlidingCounter) Charges() bool { return sc.lease == nil }

var (
	_ floodgate.Charger = (*SlidingLog)(nil)
	_ floodgate.Charger = (*SlidingCounter)(nil)
)
