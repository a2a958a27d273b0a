package floodgatetest

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The interval bound: whatever the interleaving, the units a key was
// admitted in any interval of length T are at most what its limit allows
// in T — for a greedy bucket its burst plus Rate × T, for an intervally
// refilled one its burst plus a Rate.Limit per period begun, for a log
// Rate.Limit per window of Period (T/Period + 1 of them), for a counter
// Rate.Limit per fixed window it touches (T/Period + 2) — at the largest
// rate in force in the interval. Units are counted as they are spent:
// an allowed call's cost when it is decided (a booking's when it is
// made: the bound then grows by the refill of the longest wait given), a
// charge (cost known after the response) when it is made, less a refund
// when it is made (a late refund gives credit for any units, as the
// limiters document). Beyond that the limit may owe only what calls then in
// flight over-spent (WithCostAfter's bound: their real costs less their
// estimates, at the largest such sum at any moment), once over the whole
// run, not once a window. A Reset, and a change of rate other than
// KeepUsed, forgives by design: the bound restarts after them.
//
// It needs no search, so it holds histories of any length; it needs the
// exact time of every call, so it runs only when the clock stood still
// during the calls (not under MovingClock).

// boundUnits is the units spent on a key at one instant.
type boundUnits struct {
	t     time.Duration
	units int
	recs  []*crec
}

// checkBounds checks the interval bound on every key.
func (r *run) checkBounds(recs []*crec) *failure {
	c := r.c
	if c.Algorithm == InFlightSlots || len(c.Plans) > 0 && c.PlanInherit != floodgate.KeepUsed {
		return nil
	}
	for _, rec := range recs {
		if rec.t0 != rec.t1 && rec.ret != retUnknown && rec.eff != effSetRate && !rec.gated {
			return nil // the clock moved during a call
		}
	}
	var changes []*crec
	byKey := map[string][]*crec{}
	for _, rec := range recs {
		switch {
		case rec.eff == effSetRate && !rec.noEffect:
			changes = append(changes, rec)
		case rec.key != "" && !strings.HasPrefix(rec.key, "u") && !strings.HasPrefix(rec.key, "x"):
			byKey[rec.key] = append(byKey[rec.key], rec)
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].inv < changes[j].inv })
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if f := r.boundKey(k, byKey[k], changes); f != nil {
			return f
		}
	}
	return nil
}

// boundKey checks the bound on one key's calls.
func (r *run) boundKey(key string, recs []*crec, changes []*crec) *failure {
	// Cuts: a Reset of the key, a change of rate that forgives.
	var cuts []time.Duration
	for _, rec := range recs {
		if rec.eff == effReset {
			cuts = append(cuts, rec.t0)
		}
	}
	for _, ch := range changes {
		if ch.rc.Inherit != floodgate.KeepUsed {
			cuts = append(cuts, ch.t0)
		}
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i] < cuts[j] })
	at := map[time.Duration]*boundUnits{}
	add := func(t time.Duration, units int, rec *crec) {
		u := at[t]
		if u == nil {
			u = &boundUnits{t: t}
			at[t] = u
		}
		u.units += units
		u.recs = append(u.recs, rec)
	}
	for _, rec := range recs {
		switch {
		case decided(rec) && rec.d.Allowed && rec.n > 0 && rec.t0 == rec.t1:
			add(rec.t0, rec.n, rec)
		case decided(rec) && rec.d.Allowed && rec.n > 0:
			// An admission that began late in its round (behind a
			// worker's earlier call that waited) and booked while the
			// clock moved: its time is not known, and leaving its units
			// out only loosens the bound.
		case rec.eff == effCharge && !rec.noEffect:
			add(rec.t0, rec.n, rec)
		case rec.eff == effRefund && !rec.noEffect && !rec.unknown:
			add(rec.t0, -rec.n, rec)
		}
	}
	var points []*boundUnits
	for _, u := range at {
		points = append(points, u)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].t < points[j].t })
	owed := r.overspend(recs)
	var wait time.Duration // the longest wait a booking was given
	for _, rec := range recs {
		switch {
		case rec.hungUp:
			wait = max(wait, rec.maxWait) // its wait is not known, only its bound
		case decided(rec) && rec.d.Allowed:
			wait = max(wait, rec.wait)
		}
	}
	// Segments between cuts; a point at a cut's own instant belongs to
	// neither side.
	for lo := 0; lo < len(points); {
		hi := lo
		for hi < len(points) && !cutBetween(cuts, points[lo].t, points[hi].t) {
			hi++
		}
		if f := r.boundSegment(key, points[lo:hi], changes, owed, wait); f != nil {
			return f
		}
		lo = max(hi, lo+1)
	}
	return nil
}

// cutBetween reports whether a cut lies in [a, b].
func cutBetween(cuts []time.Duration, a, b time.Duration) bool {
	i := sort.Search(len(cuts), func(i int) bool { return cuts[i] >= a })
	return i < len(cuts) && cuts[i] <= b
}

// overspend returns the largest sum, at any moment, of what calls then
// in flight were charged beyond their estimates.
func (r *run) overspend(recs []*crec) int {
	type ev struct {
		seq, units int
	}
	var evs []ev
	for _, rec := range recs {
		if rec.eff == effCharge && rec.call != nil {
			evs = append(evs, ev{rec.call.inv, rec.n}, ev{rec.ret, -rec.n})
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].seq < evs[j].seq })
	most, now := 0, 0
	for _, e := range evs {
		now += e.units
		most = max(most, now)
	}
	return most
}

// boundSegment checks every interval of one segment's points.
func (r *run) boundSegment(key string, points []*boundUnits, changes []*crec, owed int, wait time.Duration) *failure {
	if len(points) == 0 {
		return nil
	}
	start, end := points[0].t, points[len(points)-1].t
	setups, periodChanges := r.ratesIn(start, end, changes)
	for i := range points {
		sum := 0
		for j := i; j < len(points); j++ {
			sum += points[j].units
			T := points[j].t - points[i].t
			most := r.boundFor(setups, periodChanges, T, wait) + owed
			if sum > most {
				var in []*crec
				for _, p := range points[i : j+1] {
					in = append(in, p.recs...)
				}
				return &failure{kind: failBound, msg: fmt.Sprintf("key %s: %d units spent in [%v, %v] (%v), where the limit allows %d (%s, rates %v) plus %d owed by calls in flight:\n%s",
					key, sum, points[i].t, points[j].t, T, most-owed, r.boundName(), setups, owed, recordList(in))}
			}
		}
	}
	return nil
}

// ratesIn returns the rates in force at some time in [start, end], and
// how many changes of period happened in it.
func (r *run) ratesIn(start, end time.Duration, changes []*crec) ([]setup, int) {
	c := r.c
	if len(c.Plans) > 0 {
		var out []setup
		for _, p := range c.Plans {
			out = append(out, planSetup(c.Algorithm, p))
		}
		return out, 0
	}
	if len(c.Parts) > 0 {
		return nil, 0
	}
	out := []setup{}
	cur := c.setupOf()
	periods := 0
	for i := -1; i < len(changes); i++ {
		s := cur
		from := time.Duration(-1 << 62)
		if i >= 0 {
			s = rateSetup(c.Algorithm, changes[i].rc)
			from = changes[i].t0
			if s.rate.Period != cur.rate.Period && from >= start && from <= end {
				periods++
			}
			cur = s
		}
		until := time.Duration(1 << 62)
		if i+1 < len(changes) {
			until = changes[i+1].t1
		}
		if from <= end && until >= start {
			out = append(out, s)
		}
	}
	return out, periods
}

// boundFor returns the most units the limit admits in an interval of
// length T under any of setups.
func (r *run) boundFor(setups []setup, periodChanges int, T, wait time.Duration) int {
	c := r.c
	if len(c.Parts) > 0 {
		most := -1
		for _, p := range c.Parts {
			s := setup{rate: p.Rate}
			if p.Algorithm.bucket() {
				s.burst = or(p.Burst, p.Rate.Limit)
			}
			b := algBound(p.Algorithm, []setup{s}, 0, T)
			if wait > 0 {
				b += algBound(p.Algorithm, []setup{s}, 0, wait) - s.capacity()
			}
			if most < 0 || b < most {
				most = b
			}
		}
		return most
	}
	b := algBound(c.Algorithm, setups, periodChanges, T)
	if wait > 0 {
		// A booking takes its units when it is made, for a turn up to
		// wait later: the bucket may owe up to that much refill more.
		b += algBound(c.Algorithm, setups, 0, wait) - maxCapacity(setups)
	}
	if c.Lossy {
		b += maxCapacity(setups) // units leased before the interval, spent in it
	}
	return b
}

func maxCapacity(setups []setup) int {
	m := 0
	for _, s := range setups {
		m = max(m, s.capacity())
	}
	return m
}

// algBound is the bound of alg over setups for an interval of length T.
func algBound(alg Algorithm, setups []setup, periodChanges int, T time.Duration) int {
	capMax, limitMax := 0, 0
	minPeriod := time.Duration(1 << 62)
	rate := 0.0 // units per ns
	for _, s := range setups {
		capMax = max(capMax, s.capacity())
		limitMax = max(limitMax, s.rate.Limit)
		minPeriod = min(minPeriod, s.rate.Period)
		rate = max(rate, float64(s.rate.Limit)/float64(s.rate.Period))
	}
	switch alg {
	case TokenBucket:
		// The refill of T, rounded up (to a unit: the float's error is far
		// below one).
		return capMax + int(rate*float64(T)+0.999999)
	case IntervalTokenBucket:
		return capMax + limitMax*(int((T+minPeriod-1)/minPeriod)+periodChanges)
	case SlidingLog:
		return limitMax * (int(T/minPeriod) + 1)
	case SlidingCounter:
		return limitMax * (int(T/minPeriod) + 2 + periodChanges)
	}
	return 1 << 62
}

// boundName names the bound of the limiter.
func (r *run) boundName() string {
	switch {
	case len(r.c.Parts) > 0:
		return "the smallest of its parts' bounds"
	}
	switch r.c.Algorithm {
	case TokenBucket:
		return "burst + rate × T"
	case IntervalTokenBucket:
		return "burst + Limit per period begun"
	case SlidingLog:
		return "Limit per window of Period"
	case SlidingCounter:
		return "Limit per fixed window touched"
	}
	return ""
}
