package floodgatetest

import (
	"math/big"
	"time"

	"github.com/floodgate-go/floodgate"
)

// model is a reference implementation of one algorithm for one key. Models
// are written to be obviously correct, not fast: the token bucket computes
// with exact rationals, the sliding log keeps every event. The suite runs a
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

// slidingLogModel is an exact sliding window: the list of every allowed
// event still in the window, one entry per unit of cost, oldest first. An
// event at t counts at every now in [t, t+Period): the window ending at now
// is (now-Period, now].
type slidingLogModel struct {
	limit  int
	period time.Duration
	events []time.Duration
}

func newSlidingLogModel(r floodgate.Rate) *slidingLogModel {
	return &slidingLogModel{limit: r.Limit, period: r.Period}
}

func (m *slidingLogModel) allowN(now time.Duration, n int) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: m.limit}
	if err := checkCost(n, m.limit); err != nil {
		return d, err
	}
	for len(m.events) > 0 && m.events[0]+m.period <= now {
		m.events = m.events[1:]
	}
	if len(m.events)+n <= m.limit {
		d.Allowed = true
		for i := 0; i < n; i++ {
			m.events = append(m.events, now)
		}
	} else {
		// The request fits once the oldest len+n-limit events have aged
		// out; the last of them to go decides.
		d.RetryAfter = m.events[len(m.events)+n-m.limit-1] + m.period - now
	}
	d.Remaining = m.limit - len(m.events)
	if len(m.events) > 0 {
		d.ResetAfter = m.events[len(m.events)-1] + m.period - now
	}
	return d, nil
}

func (m *slidingLogModel) reset() { m.events = nil }

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
