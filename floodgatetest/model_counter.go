package floodgatetest

import (
	"math/big"
	"time"

	"github.com/floodgate-go/floodgate"
)

// slidingCounterModel is the two-window estimate of a sliding counter, in
// exact rationals. Time is cut into fixed windows of Period from the
// clock's start; prev and cur are the events counted in the window before
// the current one and in the current one, and the estimate at elapsed
// time e into the current window is prev·(Period − e)/Period + cur. A
// request of cost n is allowed iff cur + n ≤ Limit and estimate + n ≤
// Limit; a denied request counts nothing.
type slidingCounterModel struct {
	limit     int
	period    time.Duration
	window    int64 // the fixed window cur counts in
	prev, cur int
}

func newSlidingCounterModel(r floodgate.Rate) *slidingCounterModel {
	return &slidingCounterModel{limit: r.Limit, period: r.Period}
}

// roll brings the counts up to the window of now and returns its start.
func (m *slidingCounterModel) roll(now time.Duration) time.Duration {
	w := int64(now / m.period)
	switch {
	case w == m.window+1:
		m.prev, m.cur = m.cur, 0
	case w > m.window+1:
		m.prev, m.cur = 0, 0
	}
	m.window = w
	return time.Duration(w) * m.period
}

// share returns prev·(Period − e)/Period, the previous window's events
// still in the sliding window at e.
func (m *slidingCounterModel) share(e time.Duration) *big.Rat {
	return big.NewRat(int64(m.prev)*int64(m.period-e), int64(m.period))
}

func (m *slidingCounterModel) allowN(now time.Duration, n int) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: m.limit}
	if err := checkCost(n, m.limit); err != nil {
		return d, err
	}
	start := m.roll(now)
	e := now - start
	est := new(big.Rat).Add(m.share(e), ratInt(int64(m.cur+n)))
	if n == 0 || m.cur+n <= m.limit && est.Cmp(ratInt(int64(m.limit))) <= 0 {
		d.Allowed = true
		m.cur += n
	} else {
		d.RetryAfter = m.retryAt(start, n) - now
	}
	d.Remaining = max(m.limit-m.cur-int(ceil(m.share(e))), 0)
	switch {
	case m.cur > 0:
		d.ResetAfter = start + 2*m.period - now
	case m.prev > 0:
		d.ResetAfter = start + m.period - now
	}
	return d, nil
}

// retryAt returns the first nanosecond at which estimate + n ≤ Limit: in
// the current window if its own count leaves room for n (once the
// previous window's share has shrunk enough), else in the next one, where
// the current count is the previous one.
func (m *slidingCounterModel) retryAt(start time.Duration, n int) time.Duration {
	prev, room := m.prev, m.limit-m.cur-n
	if room < 0 {
		start += m.period
		prev, room = m.cur, m.limit-n
	}
	// The smallest e with prev·(Period − e) ≤ room·Period.
	if prev <= room {
		return start
	}
	return start + m.period - time.Duration(int64(room)*int64(m.period)/int64(prev))
}

func (m *slidingCounterModel) reset() { m.prev, m.cur = 0, 0 }

// change converts the counts at now: with the period unchanged they stay
// in their windows, how(prev + cur) of them, taken from prev first or
// added to the newest count (at least what any sum from cur to prev + cur
// would gain, so that a state that counts more converts to one that does
// too); with a new period, the units the estimate
// counts at now, rounded up, converted, become the count of the current
// window of the new period (fixed windows from the clock's start).
func (m *slidingCounterModel) change(now time.Duration, c setup, how floodgate.Inherit) {
	start := m.roll(now)
	if c.rate.Period != m.period {
		used := m.cur + int(ceil(m.share(now-start)))
		keep := inheritUnits(how, used, m.limit, c.rate.Limit)
		m.limit, m.period = c.rate.Limit, c.rate.Period
		m.window, m.prev, m.cur = int64(now/m.period), 0, keep
		return
	}
	used := m.prev + m.cur
	keep := inheritUnits(how, used, m.limit, c.rate.Limit)
	switch {
	case keep < used:
		drop := used - keep
		take := min(m.prev, drop)
		m.prev, m.cur = m.prev-take, m.cur-(drop-take)
	case m.cur > 0:
		// The newest count gains the most any sum from cur to used
		// would (inherit.Strategy.Counts says why), found by trying
		// each.
		gain := 0
		for t := m.cur; t <= used; t++ {
			gain = max(gain, inheritUnits(how, t, m.limit, c.rate.Limit)-t)
		}
		m.cur = min(keep, m.cur+gain)
		m.prev = keep - m.cur
	case keep > used:
		m.prev += keep - used
	}
	m.limit = c.rate.Limit
}

// intervalBucketModel is a token bucket refilled intervally
// (floodgate.WithIntervalRefill): the whole Limit comes back at once each
// Period, periods counted from the key's first event after its bucket was
// last full. used is the tokens taken and not yet back, start the
// beginning of the current period.
type intervalBucketModel struct {
	burst, limit int
	period       time.Duration
	start        time.Duration
	used         int
}

func newIntervalBucketModel(r floodgate.Rate, burst int) *intervalBucketModel {
	return &intervalBucketModel{burst: burst, limit: r.Limit, period: r.Period}
}

// roll gives back Limit tokens for each whole period since start.
func (m *intervalBucketModel) roll(now time.Duration) {
	for m.used > 0 && now-m.start >= m.period {
		m.used = max(m.used-m.limit, 0)
		m.start += m.period
	}
	if m.used == 0 {
		m.start = now
	}
}

func (m *intervalBucketModel) allowN(now time.Duration, n int) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: m.burst}
	if err := checkCost(n, m.burst); err != nil {
		return d, err
	}
	m.roll(now)
	if n == 0 || m.used+n <= m.burst {
		d.Allowed = true
		m.used += n
		if m.used == 0 {
			m.start = now
		}
	} else {
		// Each period from start gives Limit back.
		periods := (m.used + n - m.burst + m.limit - 1) / m.limit
		d.RetryAfter = m.start + time.Duration(periods)*m.period - now
	}
	d.Remaining = max(m.burst-m.used, 0)
	if m.used > 0 {
		d.ResetAfter = m.start + time.Duration((m.used+m.limit-1)/m.limit)*m.period - now
	}
	return d, nil
}

func (m *intervalBucketModel) reset() { m.used = 0 }

// change converts the bucket at now: it keeps the start of its current
// period, and how(used) tokens used, which come back Limit' at a time at
// each Period' from that start.
func (m *intervalBucketModel) change(now time.Duration, c setup, how floodgate.Inherit) {
	m.roll(now)
	m.used = inheritUnits(how, m.used, m.burst, c.burst)
	m.burst, m.limit, m.period = c.burst, c.rate.Limit, c.rate.Period
	if m.used == 0 {
		m.start = now
	}
}
