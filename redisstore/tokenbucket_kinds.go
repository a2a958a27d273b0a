package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/debtcap"
)

// This file holds what a TokenBucket on Redis does for the admission
// kinds beyond a rate, as floodgate.TokenBucket does in memory: booking
// tokens ahead (floodgate.Reserver), for WithWait, and charging beyond
// the quota (floodgate.Charger), for WithCostAfter.

// maxDebt bounds, in microseconds, how far past now a charge or a booking
// moves a bucket's state: 2^51 us, about 71 years. A debt saturates there
// rather than wrap, and every sum the scripts make stays below 2^53.
const maxDebt = 1 << 51

// maxBooking bounds ReserveN's maxWait, in microseconds, so that a
// booking's horizon (tau plus the wait, each below 2^50) stays within
// maxDebt.
const maxBooking = 1 << 50

var (
	//go:embed scripts/tokenbucket_charge.lua
	tokenBucketChargeSrc string
	//go:embed scripts/tokenbucket_reserve.lua
	tokenBucketReserveSrc string
	//go:embed scripts/tokenbucket_interval_charge.lua
	intervalChargeSrc string
	//go:embed scripts/tokenbucket_interval_reserve.lua
	intervalReserveSrc string

	tokenBucketChargeScript  = newScript(prelude + preludeRate + tokenBucketChargeSrc)
	tokenBucketReserveScript = newScript(prelude + preludeRate + tokenBucketReserveSrc)
	intervalChargeScript     = newScript(prelude + preludeRate + preludeInterval + intervalChargeSrc)
	intervalReserveScript    = newScript(prelude + preludeRate + preludeInterval + intervalReserveSrc)
)

// ChargeN takes n tokens from key's bucket whether or not it holds them
// (floodgate.Charger), as floodgate.TokenBucket.ChargeN does (not with
// leased quota, WithLease: an error wrapping floodgate.ErrInvalidOption):
// the bucket may go into debt, and every later call is denied, with a
// RetryAfter that counts the debt, until the refill has paid it. What a
// key can owe is bounded as in memory (WithMaxDebt, the same arithmetic:
// one charge at most PerCall's refill, at least the burst, at most 2^24
// tokens; the bucket at most Total's refill beyond empty, to the
// microsecond); a charge that reaches a bound is charged up to it and
// returns an error wrapping floodgate.ErrDebtCapped, and the debt never
// wraps. One round trip, O(1) on the server. The charge goes to Redis
// only, never to the fallback.
func (b *TokenBucket) ChargeN(ctx context.Context, key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: charge of n = %d is negative", floodgate.ErrInvalidCost, n)
	}
	if b.lease != nil {
		return errLeaseKinds
	}
	if n == 0 {
		return nil
	}
	var capped bool
	err := b.refund(ctx, key, func(ctx context.Context, now string) error {
		// Two replies of as many integers: {owed, capped}, {used, capped}.
		r, err := b.chargeRated(ctx, []string{b.key(key)}, func(v *rateView, conv conversion) (*script, []string) {
			p := v.alg.(*tbParams)
			c := debtcap.New(b.debt.PerCall, b.debt.Total, p.rate.Limit, p.rate.Period, p.burst)
			m := int(min(uint64(min(n, maxLimit)), c.PerCall))
			capped = m < n
			if b.interval {
				most := min(p.maxUsed(), int64(p.burst)+int64(min(c.Total, 1<<61)))
				return intervalChargeScript, []string{now, strconv.Itoa(m), p.limitArg, p.periodArg,
					strconv.FormatInt(most, 10), v.minTTL, v.ver, conv.suffix, conv.expect, conv.with}
			}
			// How far past now the debt may reach, in µs: the same bound
			// as in memory, whose tau is in ns.
			hi, lo := bits.Mul64(uint64(p.burst), uint64(p.rate.Period))
			tau, _ := bits.Div64(hi, lo, p.limit) // burst·Period/Limit < 2^50 µs: no overflow
			ahead := uint64(debtcap.BucketAhead(int64(tau), b.debt.Total, maxDebt*1000) / 1000)
			incQ, incR := ahead, uint64(0)
			if hi, lo := bits.Mul64(uint64(m), p.period); hi < p.limit {
				if q, r := bits.Div64(hi, lo, p.limit); q < ahead {
					incQ, incR = q, r
				}
			}
			return tokenBucketChargeScript, []string{now, strconv.FormatUint(incQ, 10), strconv.FormatUint(incR, 10),
				p.limitArg, strconv.FormatUint(ahead, 10), v.minTTL, v.ver, conv.suffix, conv.expect, conv.with}
		}, b.chargeConvert(), 2)
		capped = capped || err == nil && len(r) >= 2 && r[1] == 1
		return err
	})
	if err == nil && capped {
		return fmt.Errorf("%w: ChargeN(%d) on key %q", floodgate.ErrDebtCapped, n, key)
	}
	return err
}

// chargeConvert returns the conversion of the bucket's charges: its
// decisions'.
func (b *TokenBucket) chargeConvert() func(v *rateView, st []int64, at convertAt) string {
	if b.interval {
		return b.convertInterval
	}
	return b.convertGreedy
}

// maxUsed is the most tokens an intervally refilled bucket may owe: as
// many as the periods within maxDebt give back, at most 2^50.
func (p *tbParams) maxUsed() int64 {
	periods := uint64(maxDebt) / p.period
	if periods >= uint64(maxBooking)/p.limit {
		return maxBooking
	}
	return int64(periods * p.limit)
}

// ReserveN takes n tokens from key's bucket if they are there within
// maxWait (floodgate.Reserver), as floodgate.TokenBucket.ReserveN does
// (not with leased quota, WithLease: an error wrapping
// floodgate.ErrInvalidOption): at
// once if the bucket holds them, otherwise booked ahead, with the wait
// until they come in the Reservation; a turn further than maxWait is
// denied, taking nothing. maxWait is rounded down to the microsecond and
// capped at 2^50 us. RefundN gives a booking back. A booking is made on
// Redis only: while Redis is unreachable, a limiter with a fallback
// answers from it at once (AllowN), booking nothing.
func (b *TokenBucket) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (floodgate.Reservation, error) {
	wait := min(int64(maxWait/time.Microsecond), maxBooking)
	// A cost above the burst of a rate read past the refresh interval is
	// booked under the rate the booking reads, which checks it (see
	// checkCostNow).
	burst, err := b.checkCostNow(n)
	if b.lease != nil && n > 0 && err == nil && wait > 0 {
		return floodgate.Reservation{Decision: floodgate.Decision{Limit: burst}}, errLeaseKinds
	}
	if n <= 0 || err != nil || wait <= 0 {
		d, err := b.AllowN(ctx, key, n)
		return floodgate.Reservation{Decision: d}, err
	}
	if b.deny != nil {
		// A cached denial says when the tokens are there at once, not
		// whether they can be booked within maxWait: ask Redis.
		b.deny.remove(key)
	}
	var (
		res    floodgate.Reservation
		booked bool
	)
	waitArg := strconv.FormatInt(wait, 10)
	d, err := b.decide(ctx, key, n, func(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
		var err error
		if b.interval {
			res, err = b.reserveInterval(ctx, key, n, now, waitArg)
		} else {
			res, err = b.reserveGreedy(ctx, key, n, now, waitArg)
		}
		booked = err == nil
		return res.Decision, err
	})
	if err != nil || !booked {
		// Redis failed, or the fallback answered: nothing was booked.
		return floodgate.Reservation{Decision: d}, err
	}
	return res, nil
}

// reserveGreedy runs the booking script of a greedy bucket. It meets a
// change of rate as a decision does (evalRated): a bucket of an older
// rate is converted and sent with the booking, whose script writes it
// only under the view it was converted for, so that the key is converted
// once, straight to the newest rate, within the booking itself.
func (b *TokenBucket) reserveGreedy(ctx context.Context, key string, n int, now, maxWait string) (floodgate.Reservation, error) {
	var res floodgate.Reservation
	d, err := b.evalRated(ctx, []string{b.key(key)}, n, plainMode, ratedScript{build: func(v *rateView, conv conversion) (*script, []string) {
		p := v.alg.(*tbParams)
		hi, lo := bits.Mul64(uint64(n), p.period)
		incQ, incR := bits.Div64(hi, lo, p.limit) // n <= burst (evalRated checks it): at most tau
		return tokenBucketReserveScript, []string{now, strconv.Itoa(n),
			strconv.FormatUint(incQ, 10), strconv.FormatUint(incR, 10),
			p.tauQ, p.tauR, p.limitArg, v.minTTL, maxWait, v.ver, conv.suffix, conv.expect, conv.with}
	}, convert: b.convertGreedy, want: 5, read: func(v *rateView, r []int64, _ int) (floodgate.Decision, error) {
		p := v.alg.(*tbParams)
		owed, frac := r[1], r[2]
		res = floodgate.Reservation{Decision: floodgate.Decision{Allowed: r[0] > 0, Limit: p.burst}}
		res.Remaining = max(p.burst-p.tokensCeil(owed, frac), 0)
		res.ResetAfter = ceilDuration(owed, frac)
		wait, wfrac := r[3], r[4]
		if wfrac < 0 {
			wait, wfrac = wait-1, wfrac+int64(p.limit)
		}
		switch r[0] {
		case 0:
			res.RetryAfter = ceilDuration(wait, wfrac)
		case 2:
			res.Wait = ceilDuration(wait, wfrac)
		}
		return res.Decision, nil
	}})
	res.Decision = d
	return res, err
}

// reserveInterval books n tokens of an intervally refilled bucket (see
// tokenbucket_interval_reserve.lua) and derives the Reservation as
// intervalDecision does, with the wait for the period that brings a
// booking's tokens. It meets a change of rate as reserveGreedy does.
func (b *TokenBucket) reserveInterval(ctx context.Context, key string, n int, now, maxWait string) (floodgate.Reservation, error) {
	var res floodgate.Reservation
	d, err := b.evalRated(ctx, []string{b.key(key)}, n, plainMode, ratedScript{build: func(v *rateView, conv conversion) (*script, []string) {
		p := v.alg.(*tbParams)
		return intervalReserveScript, []string{now, strconv.Itoa(n), p.burstArg, p.limitArg, p.periodArg, v.minTTL, maxWait,
			v.ver, conv.suffix, conv.expect, conv.with}
	}, convert: b.convertInterval, want: 4, read: func(v *rateView, r []int64, n int) (floodgate.Decision, error) {
		p := v.alg.(*tbParams)
		d, err := p.intervalDecision(r[1:], n, r[0] > 0)
		res = floodgate.Reservation{Decision: d}
		if err == nil && r[0] == 2 {
			start, used, at := r[1], r[2], r[3]
			limit := int64(p.limit)
			res.Wait = micros(start + (used-int64(p.burst)+limit-1)/limit*int64(p.period) - at)
		}
		return d, err
	}})
	res.Decision = d
	return res, err
}

var errLeaseKinds = fmt.Errorf("%w: a limiter with leased quota (WithLease) neither charges beyond its quota nor books ahead; use the plain mode for WithCostAfter and WithWait", floodgate.ErrInvalidOption)

// Charges reports whether ChargeN charges: not with leased quota
// (WithLease), so that floodgate.WithCostAfter refuses the limiter at
// construction.
func (b *TokenBucket) Charges() bool { return b.lease == nil }

// Reserves reports whether ReserveN books ahead: not with leased quota
// (WithLease), so that floodgate.WithWait refuses the limiter at
// construction.
func (b *TokenBucket) Reserves() bool { return b.lease == nil }

var (
	_ floodgate.Charger  = (*TokenBucket)(nil)
	_ floodgate.Reserver = (*TokenBucket)(nil)
)
