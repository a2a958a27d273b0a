package floodgatetest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The linearizability check: is there an order of one key's calls,
// consistent with the order in which they were called and returned, in
// which the key's sequential model gives every call the outcome it got?
//
// The search is Wing and Gong's, as Lowe made it practical: the history's
// calls and returns in a list; at each step any call not yet placed whose
// call comes before the first return still in the list may come next; a
// return whose call has not been placed ends the branch. Memoising the
// pairs (set of calls placed, model state) already explored makes it
// polynomial for the small concurrency of a round. It runs key by key:
// floodgate's limiters keep each key's state apart, and a model over
// independent keys is linearizable if and only if each key's history is
// (Herlihy and Wing's locality; P-compositionality in Horn and Kroening's
// terms). A change of rate touches every key: it is part of each key's
// history, placed anywhere within its call, independently for each key —
// which is all a limiter that converts its keys one shard at a time
// promises.
//
// Time is part of the model's input. The clock is the checker's: when a
// call may have read it at several values (MovingClock), each is tried,
// never going back from one call to the next in the order chosen.

// linearizer checks the histories of one run.
type linearizer struct {
	c     *checker
	ticks []time.Duration // every value the clock showed, ascending
	// staleOK marks denials that a deny cache may give from an entry
	// older than a Reset or refund of the key on another instance.
	staleOK map[*crec]bool
	// budget bounds the states explored per key.
	budget int
}

// keyState is a state of the search: the model, the time of the last
// call placed, and, for a limiter that converts a key when it next
// decides for it, the change still to apply.
type keyState struct {
	m    checkModel
	last time.Duration
	pend *rateChange
}

func (s keyState) clone() keyState {
	s.m = s.m.clone()
	return s
}

func (s keyState) key() string {
	b := s.m.appendKey(nil, s.last)
	b = fmt.Appendf(b, "@%d", s.last)
	if s.pend != nil {
		b = fmt.Appendf(b, "~%d/%v/%v", s.pend.at, s.pend.to, s.pend.how)
	}
	return string(b)
}

// lentry is a call or a return in the search's list.
type lentry struct {
	op         int
	call       bool
	seq        int
	match      *lentry
	prev, next *lentry
}

func lift(e *lentry) {
	e.prev.next = e.next
	if e.next != nil {
		e.next.prev = e.prev
	}
	r := e.match
	r.prev.next = r.next
	if r.next != nil {
		r.next.prev = r.prev
	}
}

func unlift(e *lentry) {
	r := e.match
	r.prev.next = r
	if r.next != nil {
		r.next.prev = r
	}
	e.prev.next = e
	if e.next != nil {
		e.next.prev = e
	}
}

// linResult is what the search found for one key.
type linResult struct {
	ok       bool
	gaveUp   bool
	explored int
	// The longest order found, the state after it, and why none of the
	// calls that could come next fits.
	best   []int
	bestSt keyState
}

// search is one key's search.
type search struct {
	l     *linearizer
	ops   []*crec
	seen  map[string]struct{}
	order []int
	res   *linResult
	words int
}

// check searches a linearization of ops, one key's calls.
func (l *linearizer) check(ops []*crec) *linResult {
	res := &linResult{}
	if len(ops) == 0 {
		res.ok = true
		return res
	}
	var events []*lentry
	known := 0
	for i, rec := range ops {
		call := &lentry{op: i, call: true, seq: rec.inv}
		ret := &lentry{op: i, seq: rec.ret}
		call.match, ret.match = ret, call
		events = append(events, call, ret)
		if !rec.unknown {
			known++
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].seq < events[j].seq })
	head := &lentry{}
	prev := head
	for _, e := range events {
		prev.next, e.prev = e, prev
		prev = e
	}
	s := &search{l: l, ops: ops, seen: map[string]struct{}{}, res: res, words: (len(ops) + 63) / 64}
	init := keyState{m: l.c.models()}
	res.bestSt = init.clone()
	res.ok = s.dfs(head, init, make([]uint64, s.words), known)
	res.explored = len(s.seen)
	return res
}

func (s *search) dfs(head *lentry, st keyState, placed []uint64, left int) bool {
	if left == 0 {
		return true
	}
	if len(s.seen) > s.l.budget {
		s.res.gaveUp = true
		return false
	}
	if len(s.order) > len(s.res.best) {
		s.res.best = append(s.res.best[:0], s.order...)
		s.res.bestSt = st.clone()
	}
	for e := head.next; e != nil && e.call; e = e.next {
		rec := s.ops[e.op]
		for _, nx := range s.l.step(st, rec) {
			p := append([]uint64(nil), placed...)
			p[e.op/64] |= 1 << (e.op % 64)
			k := string(wordsKey(p)) + nx.key()
			if _, ok := s.seen[k]; ok {
				continue
			}
			s.seen[k] = struct{}{}
			lift(e)
			s.order = append(s.order, e.op)
			rest := left
			if !rec.unknown {
				rest--
			}
			if s.dfs(head, nx, p, rest) {
				return true
			}
			s.order = s.order[:len(s.order)-1]
			unlift(e)
			if s.res.gaveUp {
				return false
			}
		}
	}
	return false
}

func wordsKey(ws []uint64) []byte {
	b := make([]byte, 0, 8*len(ws)+1)
	for _, w := range ws {
		b = append(b, byte(w), byte(w>>8), byte(w>>16), byte(w>>24), byte(w>>32), byte(w>>40), byte(w>>48), byte(w>>56))
	}
	return append(b, '#')
}

// times returns the clock values at which rec may have taken effect,
// given that the last call placed took effect at last.
func (l *linearizer) times(last time.Duration, rec *crec) []time.Duration {
	lo, hi := max(last, rec.t0), rec.t1
	i := sort.Search(len(l.ticks), func(i int) bool { return l.ticks[i] >= lo })
	j := sort.Search(len(l.ticks), func(i int) bool { return l.ticks[i] > hi })
	if i >= j {
		return nil
	}
	return l.ticks[i:j]
}

// step returns the states rec may lead st to: one per time it may have
// taken effect at, and per plan it may have been decided under, whose
// model outcome matches what it got.
func (l *linearizer) step(st keyState, rec *crec) []keyState {
	var out []keyState
	if busy(rec, l.c.Algorithm) {
		// Refused for a capacity the whole service shares: the key's
		// state is untouched.
		for _, t := range l.times(st.last, rec) {
			nx := st.clone()
			nx.last = t
			out = append(out, nx)
		}
		return out
	}
	l.tries(st, rec, func(nx keyState, t time.Duration) {
		if ok, _ := l.apply(&nx, rec, t); ok {
			out = append(out, nx)
		}
	})
	return out
}

// tries calls try with each state rec may be applied to from st, and the
// time it takes effect at: one per clock value of its call, per plan it
// may have been decided under, and — for a key a PlanLimiter moves to
// another plan — per time of the move. The move reads the clock before
// the decision does, under the same lock, so it may be at any time of
// the call up to the decision's.
func (l *linearizer) tries(st keyState, rec *crec, try func(nx keyState, t time.Duration)) {
	times := l.times(st.last, rec)
	pm, _ := st.m.(*planModel)
	plans := []int{-1}
	if pm != nil && (rec.eff == effAllow || rec.eff == effReserve) {
		plans = pm.plansOf(rec.d.Limit)
	}
	for i, t := range times {
		for _, plan := range plans {
			moves := times[i : i+1]
			if plan >= 0 && pm.cur >= 0 && plan != pm.cur {
				moves = times[:i+1]
			}
			for _, tm := range moves {
				nx := st.clone()
				nx.last = t
				if nx.pend != nil && rec.eff != effSetRate {
					nx.m.change(nx.pend.at, nx.pend.to, nx.pend.how)
					nx.pend = nil
				}
				if plan >= 0 {
					nx.m.(*planModel).use(tm, plan)
				}
				try(nx, t)
			}
		}
	}
}

// apply runs rec on the model at t; false (with why) when the outcome it
// got is not one the model can give.
func (l *linearizer) apply(st *keyState, rec *crec, t time.Duration) (bool, string) {
	m := st.m
	switch rec.eff {
	case effAllow:
		before := m.clone()
		want, werr := m.allow(t, rec.n)
		if rec.unknown {
			return true, ""
		}
		ok, keep, why := l.matches(rec, want, werr, floodgate.Reservation{}, false)
		if ok && !keep {
			st.m = before
		}
		return ok, why
	case effReserve:
		before := m.clone()
		r, werr := m.reserve(t, rec.n, rec.maxWait)
		if errors.Is(werr, errNoReserve) {
			return false, "the model does not book ahead"
		}
		if rec.unknown {
			return true, ""
		}
		ok, keep, why := l.matches(rec, r.Decision, werr, r, true)
		if ok && !keep {
			st.m = before
		}
		return ok, why
	case effRefund:
		m.refund(t, rec.n)
	case effCharge:
		m.charge(t, rec.n)
	case effRelease:
		m.release(rec.n)
	case effReset:
		m.reset()
	case effSetRate:
		to := rateSetup(l.c.Algorithm, rec.rc)
		if l.c.RateChangeOnNextDecision {
			st.pend = &rateChange{at: t, to: to, how: rec.rc.Inherit}
		} else {
			m.change(t, to, rec.rc.Inherit)
		}
	}
	return true, ""
}

// busy reports whether rec is a denial for a capacity the whole service
// shares (Decision.Overloaded with no error), outside an in-flight limit,
// whose full table is checked apart: a PlanLimiter's lookup refused for
// capacity (Limit 0), or a rate limiter's decision that met a new rate at
// every try (redisstore's busy denial, which carries the key's Limit).
// Such a denial decides nothing for the key.
func busy(rec *crec, alg Algorithm) bool {
	return (rec.eff == effAllow || rec.eff == effReserve) && rec.err == nil && !rec.unknown &&
		!rec.d.Allowed && rec.d.Overloaded && (rec.d.Limit == 0 || alg != InFlightSlots)
}

// roundUp rounds d up to the limiter's resolution.
func (l *linearizer) roundUp(d time.Duration) time.Duration {
	r := l.c.Resolution
	if r <= 1 || d%r == 0 {
		return d
	}
	return d - d%r + r
}

// matches compares what rec got with the model's want (and, for a
// booking, its Reservation r): ok if the model allows it, keep if the
// model's state after want stands (a denial a Lossy limiter or a deny
// cache gave where the model allowed leaves the model as it was).
func (l *linearizer) matches(rec *crec, want floodgate.Decision, werr error, r floodgate.Reservation, booking bool) (ok, keep bool, why string) {
	got := rec.d
	want.RetryAfter, want.ResetAfter = l.roundUp(want.RetryAfter), l.roundUp(want.ResetAfter)
	r.Wait = l.roundUp(r.Wait)
	if werr != nil {
		if !errors.Is(rec.err, werr) {
			return false, false, fmt.Sprintf("the model says %v", werr)
		}
		if got.Allowed || got.Limit != want.Limit {
			return false, false, fmt.Sprintf("the model says %v with limit %d", werr, want.Limit)
		}
		return true, true, ""
	}
	if rec.err != nil {
		return false, false, fmt.Sprintf("the model decides %s", decisionString(want))
	}
	if l.c.Algorithm == InFlightSlots {
		// RetryAfter and ResetAfter of a slot are estimates of hold times.
		got.RetryAfter, got.ResetAfter, want.RetryAfter, want.ResetAfter = 0, 0, 0, 0
		if got.Overloaded && !got.Allowed {
			// The table of keys is full: checked apart (checkInFlightTable).
			return true, false, ""
		}
	}
	if booking && rec.gated {
		return l.gateBooking(rec, want, r)
	}
	wantWait := r.Wait
	switch {
	case l.c.Lossy && got.Allowed:
		// A Composite's Remaining is its parts' at the moments it took
		// from each, which a concurrent refund or take may have left
		// halfway: only its Allowed is compared.
		higher := got.Remaining > want.Remaining && len(l.c.Parts) == 0 && !l.c.Estimates
		if !want.Allowed || !l.limitOK(got.Limit, want.Limit) || higher || booking && rec.wait < wantWait {
			return false, false, fmt.Sprintf("allowed where the model decides %s (Remaining may be lower, never higher)", modelString(want, r, booking))
		}
		return true, true, ""
	case l.c.Lossy:
		// A denial: the model's state stands if it denied too (a log
		// counting denied attempts records it), else it is as before.
		return true, !want.Allowed, ""
	case l.c.DenyCache > 0 && !got.Allowed && !want.Allowed:
		// A stale entry (another instance undid meanwhile) may wait
		// longer than the model, as long as the cache can know.
		stale := l.staleOK[rec] && got.RetryAfter <= l.c.DenyCache
		if got.Limit != want.Limit || l.roundUp(got.RetryAfter) > want.RetryAfter && !stale {
			return false, false, fmt.Sprintf("a denial must not wait longer than the model's %s", modelString(want, r, booking))
		}
		return true, true, ""
	case l.c.DenyCache > 0 && !got.Allowed:
		if !l.staleOK[rec] {
			return false, false, fmt.Sprintf("denied where the model decides %s, with no Reset or refund of the key on another instance within the deny cache's %v", modelString(want, r, booking), l.c.DenyCache)
		}
		if got.RetryAfter > l.c.DenyCache {
			return false, false, fmt.Sprintf("a stale cached denial promises RetryAfter %v, longer than the deny cache can know (%v); the model decides %s", got.RetryAfter, l.c.DenyCache, modelString(want, r, booking))
		}
		return true, false, ""
	}
	if got != want || booking && rec.wait != wantWait {
		return false, false, "the model decides " + modelString(want, r, booking)
	}
	return true, true, ""
}

// limitOK reports whether a Lossy limiter's Limit got may stand for the
// model's want: the same, or for a Composite any part's (All reports the
// part with the fewest units left, which a call whose takes interleave
// with another's may see otherwise than any order of whole calls).
func (l *linearizer) limitOK(got, want int) bool {
	if got == want {
		return true
	}
	for _, p := range l.c.Parts {
		if got == (setup{rate: p.Rate, burst: or(p.Burst, p.Rate.Limit)}).capacity() || got == p.Rate.Limit {
			return true
		}
	}
	return false
}

// gateBooking compares an admission that may have waited for its turn:
// served at once or after its wait, refused because its turn came too
// late or the bounds on waiting were reached, or hung up while waiting.
// The admission core books first and gives a refused or hung-up booking
// back afterwards, so another call may book behind one that is then
// given back, and wait longer than any order of whole calls has it: a
// call is held to never being served sooner than the model serves it,
// nor let through where the model would not book.
func (l *linearizer) gateBooking(rec *crec, want floodgate.Decision, r floodgate.Reservation) (ok, keep bool, why string) {
	got := rec.d
	switch {
	case rec.hungUp && (!want.Allowed || got.Limit != want.Limit):
		return false, false, "a call that waited was booked; the model decides " + modelString(want, r, true)
	case rec.hungUp:
		return true, true, ""
	case got.Allowed && (!want.Allowed || got.Limit != want.Limit || rec.wait < r.Wait):
		return false, false, "served sooner than the model serves it: the model decides " + modelString(want, r, true)
	case got.Allowed:
		return true, true, ""
	}
	return true, !want.Allowed, "" // refused: the model books nothing either, or is left as it was
}

func modelString(d floodgate.Decision, r floodgate.Reservation, booking bool) string {
	s := decisionString(d)
	if booking {
		s += fmt.Sprintf(" wait=%v", r.Wait)
	}
	return s
}

// explain describes why no call could follow the longest order found.
func (l *linearizer) explain(ops []*crec, res *linResult) string {
	var b strings.Builder
	placed := map[int]bool{}
	for _, i := range res.best {
		placed[i] = true
	}
	fmt.Fprintf(&b, "the longest order the model accepts (%d of %d calls):\n", len(res.best), len(ops))
	for _, i := range res.best {
		fmt.Fprintf(&b, "\t%v\n", ops[i])
	}
	b.WriteString("after which none of these fits:\n")
	first := retUnknown
	for i, rec := range ops {
		if !placed[i] && rec.ret < first {
			first = rec.ret
		}
	}
	for i, rec := range ops {
		if placed[i] || rec.inv > first {
			continue
		}
		var whys []string
		if pm, ok := res.bestSt.m.(*planModel); ok && (rec.eff == effAllow || rec.eff == effReserve) && len(pm.plansOf(rec.d.Limit)) == 0 {
			whys = append(whys, fmt.Sprintf("no plan has capacity %d", rec.d.Limit))
		}
		l.tries(res.bestSt, rec, func(try keyState, t time.Duration) {
			if ok, why := l.apply(&try, rec, t); !ok {
				whys = append(whys, fmt.Sprintf("at t=%v: %s", t, why))
			}
		})
		if len(l.times(res.bestSt.last, rec)) == 0 {
			whys = append(whys, fmt.Sprintf("its time (%v..%v) is before the last call placed (%v)", rec.t0, rec.t1, res.bestSt.last))
		}
		fmt.Fprintf(&b, "\t%v\n\t\t%s\n", rec, strings.Join(whys, "\n\t\t"))
	}
	return b.String()
}
