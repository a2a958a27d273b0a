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
	// change converts the model's state at now to the rate of c, as
	// floodgate.Inherit how says (floodgate.RateSetter.SetRate).
	change(now time.Duration, c setup, how floodgate.Inherit)
}

// inherit returns the units a key that used u of capacity c keeps under
// capacity c2, as floodgate.Inherit how documents it, exactly.
func inherit(how floodgate.Inherit, u *big.Rat, c, c2 int) *big.Rat {
	switch how {
	case floodgate.KeepUsed:
		return u
	case floodgate.ScaleUsed:
		// u·c2/c, but no more than max(u, c2).
		v := new(big.Rat).Mul(u, big.NewRat(int64(c2), int64(c)))
		most := ratInt(int64(c2))
		if u.Cmp(most) > 0 {
			most = u
		}
		if v.Cmp(most) > 0 {
			return most
		}
		return v
	case floodgate.AddDifference:
		if c2 >= c {
			return u
		}
		v := new(big.Rat).Sub(u, ratInt(int64(c-c2)))
		if v.Sign() < 0 {
			return new(big.Rat)
		}
		return v
	}
	return new(big.Rat) // StartFresh
}

// inheritUnits is inherit for whole units, rounded up.
func inheritUnits(how floodgate.Inherit, u, c, c2 int) int {
	return int(ceil(inherit(how, ratInt(int64(u)), c, c2)))
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
	limit    int
	res      time.Duration // the resolution of a converted arrival time (see change)
	emission *big.Rat
	tau      *big.Rat
	tat      *big.Rat // nil while the bucket has never been used since a reset
}

func newTokenBucketModel(r floodgate.Rate, burst int, res time.Duration) *tokenBucketModel {
	m := &tokenBucketModel{res: max(res, 1)}
	m.set(r, burst)
	return m
}

func (m *tokenBucketModel) set(r floodgate.Rate, burst int) {
	m.burst, m.limit = burst, r.Limit
	m.emission = big.NewRat(int64(r.Period), int64(r.Limit))
	m.tau = new(big.Rat).Mul(m.emission, ratInt(int64(burst)))
}

// change converts the bucket at now: it has used u = (tat − now)/emission
// tokens, and keeps how(u), so that the new arrival time is
// now + how(u)·emission'. A store keeps that time to 1/Limit' of its
// resolution (a nanosecond in memory, a microsecond on Redis), rounded
// up, never earlier than exact.
func (m *tokenBucketModel) change(now time.Duration, c setup, how floodgate.Inherit) {
	t := ratInt(int64(now))
	var u *big.Rat
	if m.tat != nil && m.tat.Cmp(t) > 0 {
		u = new(big.Rat).Quo(new(big.Rat).Sub(m.tat, t), m.emission)
	}
	old := m.burst
	m.set(c.rate, c.burst)
	m.tat = nil
	if u == nil {
		return
	}
	ahead := new(big.Rat).Mul(inherit(how, u, old, c.burst), m.emission)
	if ahead.Sign() == 0 {
		return
	}
	// Round up to res/Limit'.
	step := big.NewRat(int64(m.res), int64(m.limit))
	ahead.Mul(ratInt(ceil(new(big.Rat).Quo(ahead, step))), step)
	m.tat = new(big.Rat).Add(t, ahead)
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
	if n == 0 || ahead.Cmp(m.tau) <= 0 { // a report, even above the burst after a downgrade
		d.Allowed = true
		m.tat, tat = next, next
	} else {
		// At now+w the same request fits iff ahead-w <= tau.
		d.RetryAfter = time.Duration(ceil(new(big.Rat).Sub(ahead, m.tau)))
	}
	// debt is how much time the bucket is short of full; each emission of
	// it, begun or whole, is a token that is not there.
	debt := new(big.Rat).Sub(tat, t)
	d.Remaining = max(m.burst-int(ceil(new(big.Rat).Quo(debt, m.emission))), 0)
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
	if n == 0 || used+n <= m.limit {
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
	d.Remaining = max(m.limit-used, 0) // a downgrade can leave more used than the limit
	if len(m.entries) > 0 {
		d.ResetAfter = m.entries[len(m.entries)-1].at + m.period - now
	}
	return d, nil
}

func (m *slidingLogModel) reset() { m.entries = nil }

// change converts the log at now: the events that still count keep
// counting, until their time plus the new period; how(used) units
// remain, taken from the oldest events or added to the newest.
func (m *slidingLogModel) change(now time.Duration, c setup, how floodgate.Inherit) {
	live := m.entries[:0]
	for _, e := range m.entries {
		if e.at+m.period > now && e.at+c.rate.Period > now {
			live = append(live, e)
		}
	}
	m.entries = live
	used := 0
	for _, e := range live {
		used += e.weight
	}
	keep := inheritUnits(how, used, m.limit, c.rate.Limit)
	for drop := used - keep; drop > 0; {
		if m.entries[0].weight > drop {
			m.entries[0].weight -= drop
			break
		}
		drop -= m.entries[0].weight
		m.entries = m.entries[1:]
	}
	if keep > used {
		m.entries[len(m.entries)-1].weight += keep - used
	}
	m.limit, m.period = c.rate.Limit, c.rate.Period
}

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
