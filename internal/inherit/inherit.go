// Package inherit holds the arithmetic of a change of rate, shared by the
// in-memory limiters of floodgate and the Redis ones of redisstore, so
// that both convert a key's state alike (see floodgate.Inherit for what
// each strategy means).
//
// Times are integers in any unit (nanoseconds in memory, microseconds on
// Redis); every product that may overflow 64 bits is taken in 128 bits,
// or in big integers when even that does not hold it.
package inherit

import (
	"math"
	"math/big"
	"math/bits"
)

// Strategy is floodgate.Inherit, by value.
type Strategy int

// The strategies, numbered as floodgate's.
const (
	KeepUsed Strategy = iota
	ScaleUsed
	AddDifference
	StartFresh
)

// Units returns the units a key that used u of capacity c keeps under
// capacity c2, rounded up. u is below 2^26 and c2 below 2^25, so no
// product overflows.
func (how Strategy) Units(u, c, c2 uint64) uint64 {
	switch how {
	case KeepUsed:
		return u
	case ScaleUsed:
		return min((u*c2+c-1)/c, max(u, c2))
	case AddDifference:
		if c2 >= c {
			return u
		}
		return u - min(u, c-c2)
	}
	return 0
}

// Counts converts a sliding counter's two counts, prev in the previous
// fixed window and cur in the current one, from capacity c to c2 with the
// period unchanged: the counts stay in their windows and their sum
// becomes Units of it. Units dropped are taken from prev first, so that
// the newest events weigh longest; units added go to cur when cur counts
// any (to prev otherwise): what the sum gains, and at least what any sum
// between cur and prev+cur would gain (moved from prev if the sum itself
// gains less).
//
// That last clause keeps the order of states: a state that counts at
// least as much in its current window and in both together converts to
// one that does too, which a bounded store needs of a conversion (its
// remembered debts are upper bounds, converted as the states they bound).
// Adding only what the sum itself gains would not: ScaleUsed caps a sum
// above c at max(sum, c2), so such a sum gains less than a smaller one
// whose newest count is as large. What a sum t gains, Units(t) − t, grows
// up to c and shrinks beyond it for every strategy, so the largest gain
// between cur and the sum is at c held between them. A state that counts
// no more than c gains exactly what its sum does.
func (how Strategy) Counts(prev, cur, c, c2 uint64) (uint64, uint64) {
	used := prev + cur
	u := how.Units(used, c, c2)
	switch {
	case u < used:
		drop := used - u
		take := min(prev, drop)
		return prev - take, cur - (drop - take)
	case cur > 0:
		cur = min(u, cur+how.Gain(used, cur, c, c2))
		return u - cur, cur
	}
	return prev + u - used, cur
}

// Gain returns what the newest units of a state must gain, under c2, for
// the conversion to keep the order of states (see Counts): the state
// counts used units of capacity c, the newest cur of them (cur <= used),
// and gains the most any count t from cur to used would, Units(t) − t
// (none where Units takes units away). The gain peaks at c, so that is
// what counts between cur and used gain, at most; a state that counts no
// more than c gains what its own count does. A sliding log's newest
// entry is its cur, and a debt it carries ahead gains this with cur its
// last window's units (see floodgate.SlidingLog.SetRate).
func (how Strategy) Gain(used, cur, c, c2 uint64) uint64 {
	gain := func(t uint64) uint64 { u := how.Units(t, c, c2); return u - min(t, u) }
	return max(gain(used), gain(min(used, max(cur, c))))
}

// Bucket is a greedy token bucket's rate: Limit tokens per Period, up to
// Burst.
type Bucket struct {
	Limit, Period, Burst uint64
}

// Greedy converts a greedy bucket whose theoretical arrival time is
// ahead + frac/from.Limit time units after the change (ahead >= 0, frac
// below from.Limit): it has used u = (ahead·Limit + frac)/Period tokens,
// and the new arrival time is how(u)·to.Period/to.Limit after the change,
// returned as q + r/to.Limit units, rounded up. A wait of max units or
// more is returned as (max, 0): held there.
func Greedy(ahead, frac uint64, from, to Bucket, how Strategy, max uint64) (q, r uint64) {
	if how == StartFresh || ahead == 0 && frac == 0 {
		return 0, 0
	}
	x, ok := greedyFast(ahead, frac, from, to, how)
	if !ok {
		x, ok = greedyBig(ahead, frac, from, to, how)
	}
	q, r = x/to.Limit, x%to.Limit
	if !ok || q >= max {
		return max, 0
	}
	return q, r
}

// greedyFast returns how(u)·to.Period, rounded up: the new arrival time
// in 1/to.Limit units (see Greedy), in 64-bit and 128-bit arithmetic, or
// false if a product does not fit.
func greedyFast(ahead, frac uint64, from, to Bucket, how Strategy) (uint64, bool) {
	hi, delta := bits.Mul64(ahead, from.Limit) // u = delta/Period
	delta, c := bits.Add64(delta, frac, 0)
	if hi+c != 0 {
		return 0, false
	}
	if how == AddDifference && to.Burst < from.Burst {
		hi, d := bits.Mul64(from.Burst-to.Burst, from.Period)
		if hi != 0 {
			return 0, false
		}
		if delta <= d {
			return 0, true
		}
		delta -= d
	}
	hi, lo := bits.Mul64(delta, to.Period) // u·Period'·Period
	if hi >= from.Period {
		return 0, false
	}
	x, rem := bits.Div64(hi, lo, from.Period)
	if rem > 0 {
		if x == math.MaxUint64 {
			return 0, false
		}
		x++
	}
	if how != ScaleUsed {
		return x, true
	}
	// u·burst'/burst, but no more than max(u, burst') tokens.
	h1, den := bits.Mul64(from.Period, from.Burst)
	h2, l2 := bits.Mul64(lo, to.Burst)
	h3, m := bits.Mul64(hi, to.Burst)
	m, c = bits.Add64(m, h2, 0)
	if h1 != 0 || h3+c != 0 || m >= den {
		return 0, false
	}
	s, rem := bits.Div64(m, l2, den)
	if rem > 0 {
		if s == math.MaxUint64 {
			return 0, false
		}
		s++
	}
	if hi, most := bits.Mul64(to.Burst, to.Period); hi == 0 && s > max(x, most) {
		s = max(x, most)
	}
	return s, true
}

// greedyBig is greedyFast in big integers; false if the result does not
// fit 64 bits.
func greedyBig(ahead, frac uint64, from, to Bucket, how Strategy) (uint64, bool) {
	var delta, x, y, p big.Int // delta/Period = u tokens
	delta.SetUint64(ahead)
	delta.Mul(&delta, p.SetUint64(from.Limit))
	delta.Add(&delta, x.SetUint64(frac))
	if how == AddDifference && to.Burst < from.Burst {
		x.SetUint64(from.Burst - to.Burst)
		delta.Sub(&delta, x.Mul(&x, p.SetUint64(from.Period)))
		if delta.Sign() <= 0 {
			return 0, true
		}
	}
	var num big.Int // u·Period'·Period
	num.Mul(&delta, p.SetUint64(to.Period))
	ceilDiv(&x, &num, y.SetUint64(from.Period))
	if how == ScaleUsed {
		var s big.Int
		num.Mul(&num, p.SetUint64(to.Burst))
		ceilDiv(&s, &num, y.Mul(y.SetUint64(from.Period), p.SetUint64(from.Burst)))
		y.Mul(y.SetUint64(to.Burst), p.SetUint64(to.Period))
		if y.Cmp(&x) < 0 {
			y.Set(&x)
		}
		if s.Cmp(&y) > 0 {
			s.Set(&y)
		}
		x.Set(&s)
	}
	if !x.IsUint64() {
		return 0, false
	}
	return x.Uint64(), true
}

// ceilDiv sets z to ceil(x/y) for non-negative x and positive y.
func ceilDiv(z, x, y *big.Int) {
	var m big.Int
	z.QuoRem(x, y, &m)
	if m.Sign() > 0 {
		z.Add(z, big.NewInt(1))
	}
}

// Interval is an intervally refilled bucket's rate: Limit tokens back at
// once each Period, up to Burst.
type Interval struct {
	Limit, Period, Burst uint64
}

// Roll returns an interval bucket's period start and tokens used at now,
// every whole period since start having given Limit back; a full bucket
// starts its period now.
func (iv Interval) Roll(start, used, now int64) (int64, int64) {
	period, limit := int64(iv.Period), int64(iv.Limit)
	if used > 0 && now-start >= period {
		k := (now - start) / period
		if k >= (used+limit-1)/limit {
			used = 0
		} else {
			used -= k * limit
			start += k * period
		}
	}
	if used == 0 {
		start = now
	}
	return start, used
}

// IntervalUsed converts the tokens used of an interval bucket, which
// keeps the start of its current period: how(used), held so that they
// come back within max time units of periods of to.
func IntervalUsed(used uint64, from, to Interval, how Strategy, max uint64) uint64 {
	u := how.Units(used, from.Burst, to.Burst)
	if hi, most := bits.Mul64(to.Limit, max/to.Period); hi == 0 {
		u = min(u, most)
	}
	return u
}
