package floodgatetest

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
)

// checkModel is the sequential model of one key that the checker holds a
// history against: the reference models of the conformance suite (model.go,
// model_counter.go), with what the admission kinds add — refunds, charges
// beyond the quota, bookings, slots — as the root package documents them.
// Unlike a model, it can be copied (clone) and named (appendKey), so that
// the search for a linearization can branch and remember where it has
// been.
type checkModel interface {
	allow(now time.Duration, n int) (floodgate.Decision, error)
	// reserve books as floodgate.Reserver.ReserveN does.
	reserve(now time.Duration, n int, maxWait time.Duration) (floodgate.Reservation, error)
	// refund gives back n units (floodgate.Refunder.RefundN).
	refund(now time.Duration, n int)
	// charge takes n units whether or not they are there
	// (floodgate.Charger.ChargeN).
	charge(now time.Duration, n int)
	// release gives back n slots (floodgate.Releaser.ReleaseN).
	release(n int)
	reset()
	change(now time.Duration, to setup, how floodgate.Inherit)
	clone() checkModel
	// appendKey appends a name of the state as it stands at now: two
	// states of one name decide alike from now on.
	appendKey(b []byte, now time.Duration) []byte
	// capacity is Decision.Limit under the current rate.
	capacity() int
}

// modelFactory returns a fresh model of a key.
type modelFactory func() checkModel

// setupOf returns the checker's initial rate as a model takes it.
func (c *checker) setupOf() setup {
	s := setup{rate: c.Rate}
	if c.Algorithm.bucket() {
		s.burst = c.Burst
		if s.burst == 0 {
			s.burst = c.Rate.Limit
		}
	}
	return s
}

// planSetup returns the rate of plan as a model of alg takes it.
func planSetup(alg Algorithm, p floodgate.Plan) setup {
	s := setup{rate: p.Rate}
	if alg.bucket() {
		s.burst = p.Burst
		if s.burst == 0 {
			s.burst = p.Rate.Limit
		}
	}
	return s
}

// rateSetup returns the rate a change sets, as a model of alg takes it.
func rateSetup(alg Algorithm, rc floodgate.RateChange) setup {
	return planSetup(alg, floodgate.Plan{Rate: rc.Rate, Burst: rc.Burst})
}

func (c *checker) modelFactory() modelFactory {
	res, debts := c.Resolution, c.MaxDebt
	switch {
	case len(c.Parts) > 0:
		parts := c.Parts
		return func() checkModel {
			m := &compositeModel{}
			for _, p := range parts {
				s := setup{rate: p.Rate}
				if p.Algorithm.bucket() {
					s.burst = or(p.Burst, p.Rate.Limit)
				}
				m.parts = append(m.parts, newCheckModel(p.Algorithm, s, p.CountDenied, res, debts))
			}
			return m
		}
	case len(c.Plans) > 0:
		var plans []setup
		for _, p := range c.Plans {
			plans = append(plans, planSetup(c.Algorithm, p))
		}
		alg, how, cd := c.Algorithm, c.PlanInherit, c.CountDenied
		return func() checkModel {
			return &planModel{alg: alg, plans: plans, how: how, countDenied: cd, res: res, debts: debts, cur: -1}
		}
	}
	alg, s, cd := c.Algorithm, c.setupOf(), c.CountDenied
	return func() checkModel { return newCheckModel(alg, s, cd, res, debts) }
}

func newCheckModel(alg Algorithm, s setup, countDenied bool, res time.Duration, debts floodgate.DebtLimits) checkModel {
	switch alg {
	case TokenBucket:
		return &bucketModel{newTokenBucketModel(s.rate, s.burst, res)}
	case IntervalTokenBucket:
		return &intervalModel{*newIntervalBucketModel(s.rate, s.burst)}
	case SlidingLog:
		return newLogModel(s.rate, countDenied, debts)
	case SlidingCounter:
		return newCounterModel(s.rate, debts)
	case InFlightSlots:
		return &slotsModel{max: s.rate.Limit}
	}
	panic(fmt.Sprintf("floodgatetest: no model of %v", alg))
}

// errNoReserve is a model's answer to a booking it cannot make.
var errNoReserve = errors.New("floodgatetest: the model does not book ahead")

// maxCost is the largest cost a charge counts (floodgate.Charger).
const maxCost = 1 << 24

// bucketModel is the greedy token bucket (tokenBucketModel) with the
// admission kinds.
type bucketModel struct{ *tokenBucketModel }

func (m *bucketModel) allow(now time.Duration, n int) (floodgate.Decision, error) {
	return m.allowN(now, n)
}

func (m *bucketModel) capacity() int { return m.burst }

// ahead returns the theoretical arrival time, or now if it has passed.
func (m *bucketModel) ahead(now time.Duration) *big.Rat {
	t := ratInt(int64(now))
	if m.tat != nil && m.tat.Cmp(t) > 0 {
		return m.tat
	}
	return t
}

// refund moves the arrival time back by n tokens (at most a burst), never
// before now.
func (m *bucketModel) refund(now time.Duration, n int) {
	t := ratInt(int64(now))
	if m.tat == nil || m.tat.Cmp(t) <= 0 || n <= 0 {
		return
	}
	back := new(big.Rat).Sub(m.tat, new(big.Rat).Mul(m.emission, ratInt(int64(min(n, m.burst)))))
	if back.Cmp(t) <= 0 {
		m.tat = nil
		return
	}
	m.tat = back
}

// charge moves the arrival time on by n tokens, from now at the earliest,
// at most 2^62 ns past now.
func (m *bucketModel) charge(now time.Duration, n int) {
	if n <= 0 {
		return
	}
	next := new(big.Rat).Add(m.ahead(now), new(big.Rat).Mul(m.emission, ratInt(int64(min(n, maxCost)))))
	if most := ratInt(int64(now) + 1<<62); next.Cmp(most) > 0 {
		next = most
	}
	m.tat = next
}

// reserve books n tokens whose turn comes within maxWait
// (TokenBucket.ReserveN).
func (m *bucketModel) reserve(now time.Duration, n int, maxWait time.Duration) (floodgate.Reservation, error) {
	if n <= 0 || n > m.burst || maxWait <= 0 {
		d, err := m.allowN(now, n)
		return floodgate.Reservation{Decision: d}, err
	}
	d, err := m.allowN(now, n)
	if err != nil || d.Allowed || d.RetryAfter > maxWait {
		return floodgate.Reservation{Decision: d}, err
	}
	m.tat = new(big.Rat).Add(m.ahead(now), new(big.Rat).Mul(m.emission, ratInt(int64(n))))
	owed := time.Duration(ceil(new(big.Rat).Sub(m.tat, ratInt(int64(now)))))
	return floodgate.Reservation{Decision: floodgate.Decision{Allowed: true, Limit: m.burst, ResetAfter: owed}, Wait: d.RetryAfter}, nil
}

func (m *bucketModel) release(int) {}

func (m *bucketModel) clone() checkModel {
	c := *m.tokenBucketModel // the rationals are never changed in place
	return &bucketModel{&c}
}

func (m *bucketModel) appendKey(b []byte, now time.Duration) []byte {
	b = fmt.Appendf(b, "tb%d/%d/%s/", m.burst, m.limit, m.emission.RatString())
	if m.tat != nil && m.tat.Cmp(ratInt(int64(now))) > 0 {
		b = append(b, m.tat.RatString()...)
	}
	return b
}

// intervalModel is the intervally refilled bucket (intervalBucketModel)
// with the admission kinds.
type intervalModel struct{ intervalBucketModel }

func (m *intervalModel) allow(now time.Duration, n int) (floodgate.Decision, error) {
	return m.allowN(now, n)
}

func (m *intervalModel) capacity() int { return m.burst }

func (m *intervalModel) refund(now time.Duration, n int) {
	m.roll(now)
	m.used = max(m.used-n, 0)
	if m.used == 0 {
		m.start = now
	}
}

func (m *intervalModel) charge(now time.Duration, n int) {
	if n <= 0 {
		return
	}
	m.roll(now)
	m.used += min(n, maxCost)
}

func (m *intervalModel) reserve(now time.Duration, n int, maxWait time.Duration) (floodgate.Reservation, error) {
	d, err := m.allowN(now, n)
	if n <= 0 || n > m.burst || maxWait <= 0 || err != nil || d.Allowed || d.RetryAfter > maxWait {
		return floodgate.Reservation{Decision: d}, err
	}
	m.used += n
	reset := m.start + time.Duration((m.used+m.limit-1)/m.limit)*m.period - now
	return floodgate.Reservation{Decision: floodgate.Decision{Allowed: true, Limit: m.burst, ResetAfter: reset}, Wait: d.RetryAfter}, nil
}

func (m *intervalModel) release(int) {}

func (m *intervalModel) clone() checkModel { c := *m; return &c }

func (m *intervalModel) appendKey(b []byte, now time.Duration) []byte {
	c := m.intervalBucketModel
	c.roll(now)
	b = fmt.Appendf(b, "ib%d/%d/%d/", c.burst, c.limit, c.period)
	if c.used > 0 {
		b = fmt.Appendf(b, "%d/%d", c.start, c.used)
	}
	return b
}

// logModel is the sliding log with every admission kind, kept as the
// store keeps it (SlidingLog.ChargeN): its real entries, one per time
// with the units recorded then, since a charge folds a log by its number
// of entries and a log counting denied attempts drops its oldest units
// (WithCountDenied); and the debt it carries into the coming windows,
// debt units dated from the newest entry (the anchor), Limit to each
// window: the i-th Limit of them at anchor + i·Period, counting for a
// Period from there, like any unit.
type logModel struct {
	limit       int
	period      time.Duration
	countDenied bool
	debts       floodgate.DebtLimits
	owing       debtCap
	entries     []logEntry
	debt        int
}

func newLogModel(r floodgate.Rate, countDenied bool, debts floodgate.DebtLimits) *logModel {
	return &logModel{limit: r.Limit, period: r.Period, countDenied: countDenied, debts: debts, owing: newDebtCap(debts, r)}
}

func (m *logModel) capacity() int { return m.limit }

// anchor returns the time a debt's windows are dated from.
func (m *logModel) anchor() time.Duration { return m.entries[len(m.entries)-1].at }

// slot returns the date of the debt's j-th window (at most 2^62 ns of
// windows past the anchor, as the store bounds it).
func (m *logModel) slot(j int) time.Duration {
	return m.anchor() + time.Duration(min(int64(j), int64(1<<62)/int64(m.period)))*m.period
}

// windows returns how many windows the debt spans.
func (m *logModel) windows() int { return (m.debt + m.limit - 1) / m.limit }

// expire drops what no longer counts at now: a debt whose anchor has aged
// out leaves the window now falls in as a real entry (every real entry
// is as old as the anchor, so gone too), and the rest carried on from
// it; then the real entries that aged out.
func (m *logModel) expire(now time.Duration) {
	if m.debt > 0 && m.anchor()+m.period <= now {
		anchor, debt := m.anchor(), m.debt
		k := int((now - anchor) / m.period) // the window dated at or before now
		slots := m.windows()
		m.entries, m.debt = nil, 0
		if k > slots {
			return
		}
		gone := (k - 1) * m.limit
		cur := min(debt-gone, m.limit)
		m.record(anchor+time.Duration(k)*m.period, cur)
		if rest := debt - gone - cur; rest > 0 {
			m.appendDebt(rest)
		}
	}
	i := 0
	for i < len(m.entries) && m.entries[i].at+m.period <= now {
		i++
	}
	if i > 0 {
		m.entries = append([]logEntry(nil), m.entries[i:]...)
	}
}

// real returns the units the real entries hold.
func (m *logModel) real() int {
	u := 0
	for _, e := range m.entries {
		u += e.weight
	}
	return u
}

// used returns the units the log counts, its debt's too.
func (m *logModel) used() int { return m.real() + m.debt }

// record adds w units at now, to the newest entry if it is of now.
func (m *logModel) record(now time.Duration, w int) {
	if k := len(m.entries); k > 0 && m.entries[k-1].at == now {
		m.entries[k-1].weight += w
		return
	}
	m.entries = append(m.entries, logEntry{now, w})
}

// takeOldest stops counting the k oldest units (a log with no debt).
func (m *logModel) takeOldest(k int) {
	for k > 0 && len(m.entries) > 0 {
		if m.entries[0].weight > k {
			m.entries[0].weight -= k
			return
		}
		k -= m.entries[0].weight
		m.entries = m.entries[1:]
	}
}

// takeNewest removes the k newest units: the debt's first.
func (m *logModel) takeNewest(k int) {
	take := min(k, m.debt)
	m.debt -= take
	k -= take
	for k > 0 && len(m.entries) > 0 {
		last := &m.entries[len(m.entries)-1]
		if last.weight > k {
			last.weight -= k
			return
		}
		k -= last.weight
		m.entries = m.entries[:len(m.entries)-1]
	}
}

// end returns when the newest unit the log counts ages out.
func (m *logModel) end() time.Duration {
	if m.debt > 0 {
		return m.slot(m.windows()) + m.period
	}
	return m.entries[len(m.entries)-1].at + m.period
}

// expiry returns when the need-th oldest unit ages out: its entry's, or
// its debt window's.
func (m *logModel) expiry(need int) time.Duration {
	for _, e := range m.entries {
		if need -= e.weight; need <= 0 {
			return e.at + m.period
		}
	}
	return m.slot((need+m.limit-1)/m.limit) + m.period
}

func (m *logModel) allow(now time.Duration, n int) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: m.limit}
	if err := checkCost(n, m.limit); err != nil {
		return d, err
	}
	m.expire(now)
	used := m.used()
	switch {
	case n == 0 || used+n <= m.limit:
		d.Allowed = true
		switch {
		case n > 0 && m.debt > 0: // the debt's only window has room: n joins it
			m.debt += n
			used += n
		case n > 0:
			m.record(now, n)
			used += n
		}
	case !m.countDenied:
	case used > m.limit || m.debt > 0:
		// In debt: the attempt counts as a charge would.
		m.chargeAt(now, min(n, m.limit))
		used = m.used()
	default:
		m.takeOldest(used + n - m.limit)
		m.record(now, n)
		used = m.limit
	}
	d.Remaining = max(m.limit-used, 0)
	if len(m.entries) > 0 {
		d.ResetAfter = m.end() - now
	}
	if !d.Allowed {
		d.RetryAfter = m.expiry(used+n-m.limit) - now
	}
	return d, nil
}

func (m *logModel) reserve(time.Duration, int, time.Duration) (floodgate.Reservation, error) {
	return floodgate.Reservation{}, errNoReserve
}

// refund takes the n newest units off (SlidingLog.RefundN).
func (m *logModel) refund(_ time.Duration, n int) {
	m.entries = append([]logEntry(nil), m.entries...)
	m.takeNewest(n)
}

func (m *logModel) charge(now time.Duration, n int) {
	if n <= 0 {
		return
	}
	m.expire(now)
	m.chargeAt(now, min(n, m.owing.perCall))
}

// chargeAt records w units at now beyond the limit if need be: what the
// window has room for at now, the rest added to the debt carried ahead,
// up to its bound (owing.total).
func (m *logModel) chargeAt(now time.Duration, w int) {
	if m.debt == 0 {
		if used := m.real(); used < m.limit {
			fill := min(w, m.limit-used)
			m.record(now, fill)
			w -= fill
		}
	}
	if w == 0 || m.debt >= m.owing.total {
		return
	}
	add := min(w, m.owing.total-m.debt)
	if m.debt > 0 {
		m.debt += add
		return
	}
	m.appendDebt(add)
}

// appendDebt starts a debt of w units after the newest entry. A log of
// Limit entries (at least 2) folds first: its units become one entry at
// its newest entry's time.
func (m *logModel) appendDebt(w int) {
	if len(m.entries) >= max(m.limit, 2) {
		m.entries = []logEntry{{m.anchor(), m.real()}}
	}
	m.debt = w
}

func (m *logModel) release(int) {}
func (m *logModel) reset()      { m.entries, m.debt = nil, 0 }

// change converts the log at now (SlidingLog.SetRate): the units that
// still count keep counting until their time plus the new period, and
// how(used) of them remain, taken from the oldest or added to the newest
// entry (at least what any count from its units to used would gain,
// moved from the oldest if used gains less) — but a log that carries a
// debt keeps every unit, and under a new Limit or Period its real units
// fold into one entry at now, the debt's anchor from then on; its debt
// gains as its last window's units are the newest, and, cut into
// windows of the new period from that anchor, it ends no sooner than it
// did.
func (m *logModel) change(now time.Duration, to setup, how floodgate.Inherit) {
	m.expire(now)
	old := *m
	m.limit, m.period, m.owing = to.rate.Limit, to.rate.Period, newDebtCap(m.debts, to.rate)
	if how == floodgate.StartFresh || len(m.entries) == 0 {
		m.entries, m.debt = nil, 0
		return
	}
	var end time.Duration
	if old.debt > 0 {
		end = old.end()
		if m.limit != old.limit || m.period != old.period {
			// Its real units fold into one entry at now, the debt's
			// anchor from then on.
			m.entries = []logEntry{{max(now, m.anchor()), m.real()}}
		}
	}
	if m.period < old.period {
		keep := len(m.entries) // a debt keeps its anchor
		if m.debt > 0 {
			keep--
		}
		i := 0
		for i < keep && m.entries[i].at+m.period <= now {
			i++
		}
		if m.entries = m.entries[i:]; len(m.entries) == 0 {
			m.entries = nil
			return
		}
	}
	used := m.used()
	switch u := inheritUnits(how, used, old.limit, m.limit); {
	case u < used && m.debt > 0:
	case u < used:
		m.takeOldest(used - u)
	case m.debt > 0:
		// The debt gains the most any count from its last window's
		// units to the whole would, and keeps every unit.
		last := m.debt - (m.debt-1)/old.limit*old.limit
		m.debt += logGain(how, last, used, old.limit, m.limit)
	default:
		// The newest entry gains the most any count from its units to
		// the whole would, taken back from the oldest if the whole
		// gains less (inherit.Strategy.Counts says why).
		newest := &m.entries[len(m.entries)-1]
		add := min(logGain(how, newest.weight, used, old.limit, m.limit), u-newest.weight)
		newest.weight += add
		m.takeOldest(used + add - u)
	}
	if m.debt > 0 && m.period != old.period {
		windows := max((end-m.period-m.anchor()+m.period-1)/m.period, 1)
		if full := min(int(windows)*m.limit, maxLogDebt); m.debt < full {
			m.debt = full
		}
	}
}

// logGain returns the most a count t from cur to used gains from c to
// c2 (none where it loses), found by trying each t up to the largest
// below which the gain may grow (c: it shrinks beyond), and used.
func logGain(how floodgate.Inherit, cur, used, c, c2 int) int {
	gain := max(inheritUnits(how, used, c, c2)-used, 0)
	for t := cur; t <= min(used, max(cur, c)); t++ {
		gain = max(gain, inheritUnits(how, t, c, c2)-t)
	}
	return gain
}

func (m *logModel) clone() checkModel {
	c := *m
	c.entries = append([]logEntry(nil), m.entries...)
	return &c
}

func (m *logModel) appendKey(b []byte, now time.Duration) []byte {
	b = fmt.Appendf(b, "sl%d/%d/", m.limit, m.period)
	for i, e := range m.entries {
		if e.at+m.period > now || m.debt > 0 && i == len(m.entries)-1 {
			b = fmt.Appendf(b, "%d:%d,", e.at, e.weight)
		}
	}
	if m.debt > 0 {
		b = fmt.Appendf(b, "+%d", m.debt)
	}
	return b
}

// counterModel is the sliding counter (slidingCounterModel) with the
// admission kinds. A charge beyond the limit carries its overflow into
// the fixed windows after the current one, Limit to each
// (SlidingCounter.ChargeN): the state then names the debt's last window,
// ahead of now, its count, and the window before it, which is full.
type counterModel struct {
	slidingCounterModel
	debts floodgate.DebtLimits
	owing debtCap
}

func newCounterModel(r floodgate.Rate, debts floodgate.DebtLimits) *counterModel {
	return &counterModel{*newSlidingCounterModel(r), debts, newDebtCap(debts, r)}
}

// ahead reports whether the counts carry a debt past now's window.
func (m *counterModel) ahead(now time.Duration) bool { return m.window > int64(now/m.period) }

func (m *counterModel) allow(now time.Duration, n int) (floodgate.Decision, error) {
	if !m.ahead(now) {
		return m.allowN(now, n)
	}
	// Every window up to the debt's last counts the limit: only a report
	// is allowed, and a request waits for the estimate of the last
	// window and the one after it.
	d := floodgate.Decision{Limit: m.limit, Allowed: n == 0}
	if err := checkCost(n, m.limit); err != nil {
		return floodgate.Decision{Limit: m.limit}, err
	}
	start := time.Duration(m.window) * m.period
	if n > 0 {
		d.RetryAfter = m.retryAt(start, n) - now
	}
	d.ResetAfter = start + 2*m.period - now
	if m.cur == 0 {
		d.ResetAfter -= m.period
	}
	return d, nil
}

func (m *counterModel) capacity() int { return m.limit }

func (m *counterModel) reserve(time.Duration, int, time.Duration) (floodgate.Reservation, error) {
	return floodgate.Reservation{}, errNoReserve
}

// refund uncounts n events, from the current window first
// (SlidingCounter.RefundN); from a debt carried ahead, from its last
// window back.
func (m *counterModel) refund(now time.Duration, n int) {
	if m.ahead(now) {
		m.refundAhead(int64(now/m.period), n)
		return
	}
	m.roll(now)
	take := min(m.cur, n)
	m.cur -= take
	m.prev -= min(m.prev, n-take)
}

// refundAhead takes n events off a debt carried past window w: what is
// left is carried again from w, Limit to a window; taking more than the
// debt leaves window w counting the limit (or the full window before
// the debt's last) less the rest, after a full one.
func (m *counterModel) refundAhead(w int64, n int) {
	carried := int(m.window-w-1)*m.limit + m.cur // the windows after w
	if n < carried {
		left := carried - n
		k := (left + m.limit - 1) / m.limit
		prev := m.limit
		if w+int64(k) == m.window {
			prev = m.prev
		}
		m.window, m.prev, m.cur = w+int64(k), prev, left-(k-1)*m.limit
		return
	}
	cur := m.prev // window w, when it is the one before the last
	if m.window-w > 1 {
		cur = m.limit
	}
	m.window, m.prev, m.cur = w, m.limit, cur-min(cur, n-carried)
}

// charge counts n events at now, those beyond the limit (or beyond the
// count a downgrade left) in the windows after the current one (or after
// the debt's last), Limit to each, the last holding the rest; at most
// owing.perCall events, and up to owing.periods windows past now's.
func (m *counterModel) charge(now time.Duration, n int) {
	if n <= 0 {
		return
	}
	c := min(n, m.owing.perCall)
	w := int64(now / m.period)
	if !m.ahead(now) {
		m.roll(now)
	}
	total := m.cur + c
	full := max(m.limit, m.cur)
	if total <= full {
		m.cur = min(total, 1<<30)
		return
	}
	over := total - full
	k := int64((over + m.limit - 1) / m.limit) // windows more, at least one
	most := max(w+m.owing.periods-m.window, 0)
	rem := over - int(k-1)*m.limit
	if k > most {
		k, rem = most, m.limit
	}
	switch k {
	case 0:
		m.cur = full
	case 1:
		m.window, m.prev, m.cur = m.window+1, full, rem
	default:
		m.window, m.prev, m.cur = m.window+k, m.limit, rem
	}
}

func (m *counterModel) change(now time.Duration, to setup, how floodgate.Inherit) {
	if m.ahead(now) {
		// A debt carried ahead is converted as of its last window.
		now = time.Duration(m.window) * m.period
	}
	m.slidingCounterModel.change(now, to, how)
	if m.prev == 0 && m.cur == 0 {
		m.window = 0 // nothing left, nothing carried ahead
	}
	m.owing = newDebtCap(m.debts, to.rate)
}

func (m *counterModel) release(int) {}

func (m *counterModel) clone() checkModel { c := *m; return &c }

func (m *counterModel) appendKey(b []byte, now time.Duration) []byte {
	c := m.slidingCounterModel
	if !m.ahead(now) {
		c.roll(now)
	}
	return fmt.Appendf(b, "sc%d/%d/%d/%d/%d", c.limit, c.period, c.window, c.prev, c.cur)
}

// slotsModel is an in-flight limit: the slots a key holds.
type slotsModel struct{ max, held int }

func (m *slotsModel) capacity() int { return m.max }

func (m *slotsModel) allow(_ time.Duration, n int) (floodgate.Decision, error) {
	if n < 0 {
		return floodgate.Decision{Limit: m.max}, floodgate.ErrInvalidCost
	}
	allowed := n <= m.max && m.held+n <= m.max
	if allowed {
		m.held += n
	}
	d := floodgate.Decision{Allowed: allowed, Limit: m.max, Remaining: max(m.max-m.held, 0)}
	if !allowed {
		d.RetryAfter = time.Millisecond // an estimate, never compared: see linearizer.matches
	}
	if n > m.max {
		return d, floodgate.ErrCostExceedsLimit
	}
	return d, nil
}

func (m *slotsModel) reserve(time.Duration, int, time.Duration) (floodgate.Reservation, error) {
	return floodgate.Reservation{}, errNoReserve
}
func (m *slotsModel) refund(time.Duration, int)                      {}
func (m *slotsModel) charge(time.Duration, int)                      {}
func (m *slotsModel) release(n int)                                  { m.held = max(m.held-n, 0) }
func (m *slotsModel) reset()                                         { m.held = 0 }
func (m *slotsModel) change(time.Duration, setup, floodgate.Inherit) {}
func (m *slotsModel) clone() checkModel                              { c := *m; return &c }
func (m *slotsModel) appendKey(b []byte, _ time.Duration) []byte {
	return strconv.AppendInt(append(b, "if"...), int64(m.held), 10)
}

// compositeModel decides as floodgate.All does over its parts' models,
// each call at once: a first look at every part with n = 0, a denial if
// one cannot fit (asking those for their RetryAfter), else a take from
// each.
type compositeModel struct{ parts []checkModel }

func (m *compositeModel) capacity() int {
	c := m.parts[0].capacity()
	for _, p := range m.parts[1:] {
		c = min(c, p.capacity())
	}
	return c
}

func (m *compositeModel) allow(now time.Duration, n int) (floodgate.Decision, error) {
	if n < 0 {
		return floodgate.Decision{}, floodgate.ErrInvalidCost
	}
	rep := make([]floodgate.Decision, len(m.parts))
	blocked := false
	for i, p := range m.parts {
		d, err := p.allow(now, 0)
		if err != nil {
			return floodgate.Decision{}, err
		}
		if n > d.Limit {
			d.Allowed = false
			return d, floodgate.ErrCostExceedsLimit
		}
		rep[i] = d
		blocked = blocked || d.Remaining < n
	}
	if n == 0 {
		return mergeDecisions(rep, true), nil
	}
	if blocked {
		for i, p := range m.parts {
			if rep[i].Remaining >= n {
				continue
			}
			rep[i], _ = p.allow(now, n) // a denial: it consumes nothing
		}
		return mergeDecisions(rep, false), nil
	}
	for i, p := range m.parts {
		rep[i], _ = p.allow(now, n)
	}
	return mergeDecisions(rep, true), nil
}

// mergeDecisions is how floodgate.All reports its parts' decisions.
func mergeDecisions(ds []floodgate.Decision, allowed bool) floodgate.Decision {
	out := floodgate.Decision{Allowed: allowed, Remaining: ds[0].Remaining, Limit: ds[0].Limit, Overloaded: !allowed}
	for _, d := range ds {
		if !d.Allowed && !d.Overloaded {
			out.Overloaded = false
		}
		out.ResetAfter = max(out.ResetAfter, d.ResetAfter)
		if d.Remaining < out.Remaining {
			out.Remaining = d.Remaining
			if allowed {
				out.Limit = d.Limit
			}
		}
		if !allowed && d.RetryAfter > out.RetryAfter {
			out.RetryAfter = d.RetryAfter
			out.Limit = d.Limit
		}
	}
	return out
}

// reserve books in every part, in order, or gives back what it booked
// (Composite.ReserveN).
func (m *compositeModel) reserve(now time.Duration, n int, maxWait time.Duration) (floodgate.Reservation, error) {
	var rep []floodgate.Decision
	var wait time.Duration
	for i, p := range m.parts {
		r, err := p.reserve(now, n, maxWait)
		if err != nil || !r.Allowed {
			for j := i - 1; j >= 0; j-- {
				m.parts[j].refund(now, n)
			}
			if err != nil {
				return floodgate.Reservation{Decision: r.Decision}, err
			}
			return floodgate.Reservation{Decision: mergeDecisions([]floodgate.Decision{r.Decision}, false)}, nil
		}
		rep = append(rep, r.Decision)
		wait = max(wait, r.Wait)
	}
	return floodgate.Reservation{Decision: mergeDecisions(rep, true), Wait: wait}, nil
}

func (m *compositeModel) refund(now time.Duration, n int) {
	for _, p := range m.parts {
		p.refund(now, n)
	}
}

func (m *compositeModel) charge(now time.Duration, n int) {
	for _, p := range m.parts {
		p.charge(now, n)
	}
}

func (m *compositeModel) release(int) {}

func (m *compositeModel) reset() {
	for _, p := range m.parts {
		p.reset()
	}
}

func (m *compositeModel) change(time.Duration, setup, floodgate.Inherit) {}

func (m *compositeModel) clone() checkModel {
	c := &compositeModel{parts: make([]checkModel, len(m.parts))}
	for i, p := range m.parts {
		c.parts[i] = p.clone()
	}
	return c
}

func (m *compositeModel) appendKey(b []byte, now time.Duration) []byte {
	for _, p := range m.parts {
		b = append(p.appendKey(b, now), '|')
	}
	return b
}

// planModel is a key of a PlanLimiter: the model of the plan its state is
// in, converted as PlanConfig.Inherit says when a decision is made under
// another plan (the plan is read off Decision.Limit, see use).
type planModel struct {
	alg         Algorithm
	plans       []setup
	how         floodgate.Inherit
	countDenied bool
	res         time.Duration
	debts       floodgate.DebtLimits
	cur         int // -1: the key has no state yet
	m           checkModel
}

// use moves the key's state to plan at now, as the PlanLimiter does when
// it decides for the key under plan.
func (m *planModel) use(now time.Duration, plan int) {
	switch {
	case m.cur < 0:
		m.m = newCheckModel(m.alg, m.plans[plan], m.countDenied, m.res, m.debts)
	case plan != m.cur:
		m.m.change(now, m.plans[plan], m.how)
	}
	m.cur = plan
}

// plansOf returns the plans whose capacity is limit.
func (m *planModel) plansOf(limit int) []int {
	var out []int
	for i, p := range m.plans {
		if p.capacity() == limit {
			out = append(out, i)
		}
	}
	return out
}

func (m *planModel) capacity() int {
	if m.cur < 0 {
		return 0
	}
	return m.m.capacity()
}

func (m *planModel) allow(now time.Duration, n int) (floodgate.Decision, error) {
	if m.cur < 0 {
		return floodgate.Decision{}, errNoReserve
	}
	return m.m.allow(now, n)
}

func (m *planModel) reserve(now time.Duration, n int, maxWait time.Duration) (floodgate.Reservation, error) {
	if m.cur < 0 {
		return floodgate.Reservation{}, errNoReserve
	}
	return m.m.reserve(now, n, maxWait)
}

func (m *planModel) refund(now time.Duration, n int) {
	if m.cur >= 0 {
		m.m.refund(now, n)
	}
}

func (m *planModel) charge(now time.Duration, n int) {
	if m.cur >= 0 {
		m.m.charge(now, n)
	}
}

func (m *planModel) release(n int) {
	if m.cur >= 0 {
		m.m.release(n)
	}
}

func (m *planModel) reset() {
	if m.cur >= 0 {
		m.m.reset()
	}
}

func (m *planModel) change(time.Duration, setup, floodgate.Inherit) {}

func (m *planModel) clone() checkModel {
	c := *m
	if m.m != nil {
		c.m = m.m.clone()
	}
	return &c
}

func (m *planModel) appendKey(b []byte, now time.Duration) []byte {
	b = strconv.AppendInt(append(b, 'p'), int64(m.cur), 10)
	if m.m != nil {
		b = m.m.appendKey(append(b, '/'), now)
	}
	return b
}
