package floodgatetest

import (
	"math/big"
	"time"

	"github.com/floodgate-go/floodgate"
)

// model is a reference implementation of one algorithm for one key. Models
// are written to be obviously correct, not fast: the token bucket computes
// with exact rationals, the sliding log keeps every decision. The suite runs a
// model beside the limiter under test and requires the same decision at
// every step.
type model interface {
	// allowN decides a request of cost n at now, a time measured from the
	// same origin as every earlier call.
	allowN(now time.Duration, n int) (floodgate.Decision, error)
	// reset forgets every event, as Resetter.Reset does.
	reset()
}

// checkCost returns the sentinel every limiter's error must wrap for a
// cost it can never allow: capacity is the most units the limit can ever
// hold.
func checkCost(n, capacity int) error {
	if n < 0 {
		return floodgate.ErrInvalidCost
	}
	if n > capacity {
		return floodgate.ErrCostExceedsLimit
	}
	return nil
}

// tokenBucketModel is a greedy token bucket as GCRA, in exact rational
// nanoseconds. A token is worth emission = Period/Limit of time; the
// theoretical arrival time tat is when the bucket will be full again if
// nothing more is taken. A request of cost n is allowed iff, after adding
// n·emission to tat (or to now, if tat has passed), tat is at most
// tau = burst·emission ahead of now.
type tokenBucketModel struct {
	burst    int
	emission *big.Rat
	tau      *big.Rat
	tat      *big.Rat // nil while the bucket has never been used since a reset
}

func newTokenBucketModel(r floodgate.Rate, burst int) *tokenBucketModel {
	emission := big.NewRat(int64(r.Period), int64(r.Limit))
	return &tokenBucketModel{
		burst:    burst,
		emission: emission,
		tau:      new(big.Rat).Mul(emission, ratInt(int64(burst))),
	}
}

func (m *tokenBucketModel) allowN(now time.Duration, n int) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: m.burst}
	if err := checkCost(n, m.burst); err != nil {
		return d, err
	}
	t := ratInt(int64(now))
	tat := t
	if m.tat != nil && m.tat.Cmp(t) > 0 {
		tat = m.tat
	}
	next := new(big.Rat).Add(tat, new(big.Rat).Mul(m.emission, ratInt(int64(n))))
	ahead := new(big.Rat).Sub(next, t)
	if ahead.Cmp(m.tau) <= 0 {
		d.Allowed = true
		m.tat, tat = next, next
	} else {
		// At now+w the same request fits iff ahead-w <= tau.
		d.RetryAfter = time.Duration(ceil(new(big.Rat).Sub(ahead, m.tau)))
	}
	// debt is how much time the bucket is short of full; each emission of
	// it, begun or whole, is a token that is not there.
	debt := new(big.Rat).Sub(tat, t)
	d.Remaining = m.burst - int(ceil(new(big.Rat).Quo(debt, m.emission)))
	d.ResetAfter = time.Duration(ceil(debt))
	return d, nil
}

func (m *tokenBucketModel) reset() { m.tat = nil }

// slidingLogModel is an exact sliding window, kept as the stores keep it:
// one entry per allowed decision, its time and its weight n, oldest first.
// An entry at t counts at every now in [t, t+Period): the window ending at
// now is (now-Period, now].
type slidingLogModel struct {
	limit   int
	period  time.Duration
	entries []logEntry
}

type logEntry struct {
	at     time.Duration
	weight int
}

func newSlidingLogModel(r floodgate.Rate) *slidingLogModel {
	return &slidingLogModel{limit: r.Limit, period: r.Period}
}

func (m *slidingLogModel) allowN(now time.Duration, n int) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: m.limit}
	if err := checkCost(n, m.limit); err != nil {
		return d, err
	}
	for len(m.entries) > 0 && m.entries[0].at+m.period <= now {
		m.entries = m.entries[1:]
	}
	used := 0
	for _, e := range m.entries {
		used += e.weight
	}
	if used+n <= m.limit {
		d.Allowed = true
		if n > 0 {
			m.entries = append(m.entries, logEntry{now, n})
			used += n
		}
	} else {
		// The request fits once used+n-limit units have aged out: at the
		// expiry of the entry with which the oldest weigh that much.
		need := used + n - m.limit
		for _, e := range m.entries {
			if need -= e.weight; need <= 0 {
				d.RetryAfter = e.at + m.period - now
				break
			}
		}
	}
	d.Remaining = m.limit - used
	if len(m.entries) > 0 {
		d.ResetAfter = m.entries[len(m.entries)-1].at + m.period - now
	}
	return d, nil
}

func (m *slidingLogModel) reset() { m.entries = nil }

func ratInt(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }

// ceil returns the smallest integer >= x, which must fit in an int64.
func ceil(x *big.Rat) int64 {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	// QuoRem truncates towards zero; only a positive remainder rounds up.
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
