package floodgatetest

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// failure is a violation the checker found in a history.
type failure struct {
	// kind names the property violated; the shrinker keeps a program
	// that still fails with the same kind.
	kind string
	msg  string
}

func (f *failure) report(Program) string { return f.kind + ": " + f.msg }

// Kinds of failure.
const (
	failRules      = "a decision breaks the rules of every decision"
	failLinear     = "no order of the calls fits the sequential model (not linearizable)"
	failRate       = "a decision under a rate older than one already seen"
	failBound      = "more admitted in an interval than the limit allows"
	failReset      = "a Reset did not last until the key spent again"
	failShortfall  = "a key under its quota was denied more than the stated shortfall"
	failFailOpen   = "a call of a key with no plan reached the handler"
	failPlan       = "a decision under a plan the key never had"
	failTable      = "an in-flight call denied as Overloaded while the table had room"
	failSlotLease  = "a slot held by no one after its lease"
	failDeadlock   = "deadlock under the deterministic scheduler"
	linearBudget   = 100_000 // states per key before the search gives up
	maxShownCalls  = 60
	serviceWideKey = "\x00service"
)

// check holds the run's history to every property.
func (r *run) check() *failure {
	recs := r.hist.records()
	if os.Getenv("FLOODGATE_CHECK_DEBUG") != "" {
		r.log.Logf("history:\n%s", recordList(recs))
		for i, inst := range r.insts {
			if st, ok := inst.lim.(interface{ Stats() floodgate.Stats }); ok {
				r.log.Logf("instance %d: %+v", i, st.Stats())
			}
		}
	}
	if lost := r.lostLeases(); lost > 0 {
		// The limiter says it let slots of calls still running expire
		// (a renewal came later than the lease): more than the limit in
		// flight is then what it documents, not a finding.
		r.log.Logf("seed %d: the limiter lost leases of running calls (LostLeases: %d): the history is not checked", r.p.Seed, lost)
		return nil
	}
	ticks := append([]time.Duration(nil), r.ticks...)
	sort.Slice(ticks, func(i, j int) bool { return ticks[i] < ticks[j] })
	ticks = dedup(ticks)
	for _, f := range []func([]*crec) *failure{
		r.checkRules, r.checkFailOpen, r.checkPlans, r.checkRates, r.checkInFlightTable,
		r.checkSlotLeases, r.checkResets,
	} {
		if f := f(recs); f != nil {
			return f
		}
	}
	if f := r.checkLinearizable(recs, ticks); f != nil {
		return f
	}
	if f := r.checkBounds(recs); f != nil {
		return f
	}
	return r.checkShortfall(recs)
}

func dedup(ts []time.Duration) []time.Duration {
	out := ts[:0]
	for i, t := range ts {
		if i == 0 || t != ts[i-1] {
			out = append(out, t)
		}
	}
	return out
}

// decided reports whether rec is a decision with a known outcome.
func decided(rec *crec) bool {
	return (rec.eff == effAllow || rec.eff == effReserve) && !rec.unknown && rec.err == nil
}

// serviceWide reports whether the limiter ignores keys.
func (r *run) serviceWide() bool {
	sw, ok := r.insts[0].lim.(interface{ ServiceWide() bool })
	return ok && sw.ServiceWide()
}

// partitionKey is the key whose history rec belongs to.
func (r *run) partitionKey(rec *crec) string {
	if r.serviceWide() {
		return serviceWideKey
	}
	return rec.key
}

// checkRules holds every decision to what any Decision promises.
func (r *run) checkRules(recs []*crec) *failure {
	for _, rec := range recs {
		if !decided(rec) || rec.hungUp {
			continue
		}
		d := rec.d
		var why string
		switch {
		case d.Remaining < 0 || d.Remaining > d.Limit:
			why = fmt.Sprintf("Remaining %d outside [0, Limit %d]", d.Remaining, d.Limit)
		case d.ResetAfter < 0:
			why = "negative ResetAfter"
		case d.Allowed && d.RetryAfter != 0:
			why = "allowed with a RetryAfter"
		case !d.Allowed && rec.n > 0 && d.RetryAfter <= 0:
			why = "denied with no RetryAfter"
		case !d.Allowed && rec.n > 0 && d.Remaining >= rec.n && !d.Overloaded && !rec.gated:
			why = "denied although Remaining covers the cost"
		}
		if why != "" {
			return &failure{kind: failRules, msg: fmt.Sprintf("%s: %v", why, rec)}
		}
	}
	return nil
}

// checkFailOpen: under fail-open, no call of a key with no plan reaches
// the handler (a lookup refused for capacity is not an outage).
func (r *run) checkFailOpen(recs []*crec) *failure {
	if r.c.Gate == nil || len(r.c.Plans) == 0 {
		return nil
	}
	for _, rec := range recs {
		if rec.gated && (rec.eff == effAllow || rec.eff == effReserve) && strings.HasPrefix(rec.key, "u") && !rec.blocked {
			return &failure{kind: failFailOpen, msg: fmt.Sprintf("%v\n(the resolver says %q has no plan: its calls must be refused whatever the error policy)", rec, rec.key)}
		}
	}
	return nil
}

// checkPlans: a decision is made under a plan the resolver gave its key
// before it returned; a key with none is never decided.
func (r *run) checkPlans(recs []*crec) *failure {
	if len(r.c.Plans) == 0 {
		return nil
	}
	set := map[string][]*crec{}
	for _, rec := range recs {
		if rec.eff == effSetPlan {
			set[rec.key] = append(set[rec.key], rec)
		}
	}
	for _, rec := range recs {
		if !decided(rec) || busy(rec, r.c.Algorithm) || rec.gated && rec.blocked && !rec.d.Allowed && rec.d.Limit == 0 {
			continue
		}
		if strings.HasPrefix(rec.key, "u") {
			if rec.d.Allowed {
				return &failure{kind: failPlan, msg: fmt.Sprintf("%v: a key with no plan was allowed", rec)}
			}
			continue
		}
		had := map[int]bool{initialPlan(rec.key, len(r.c.Plans)): true}
		for _, s := range set[rec.key] {
			if s.inv < rec.ret {
				had[s.op.Plan] = true
			}
		}
		ok := false
		for i, p := range r.c.Plans {
			if had[i] && planSetup(r.c.Algorithm, p).capacity() == rec.d.Limit {
				ok = true
			}
		}
		if !ok {
			return &failure{kind: failPlan, msg: fmt.Sprintf("%v: no plan the key had has capacity %d", rec, rec.d.Limit)}
		}
	}
	return nil
}

// checkRates: once SetRate has returned, every decision reports its
// quota or a later one's, and a key once decided under a rate (a decision
// that consumed, or could have) is never decided under an older one.
func (r *run) checkRates(recs []*crec) *failure {
	if !r.c.caps.setRate || len(r.c.Rates) == 0 {
		return nil
	}
	var changes []*crec
	for _, rec := range recs {
		if rec.eff == effSetRate && !rec.noEffect {
			changes = append(changes, rec)
		}
	}
	if len(changes) == 0 {
		return nil
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].inv < changes[j].inv })
	caps := []int{r.c.setupOf().capacity()}
	for _, ch := range changes {
		caps = append(caps, rateSetup(r.c.Algorithm, ch.rc).capacity())
	}
	// versions returns the versions rec may have been decided under.
	versions := func(rec *crec) (lo, hi int, vs []int) {
		for _, ch := range changes {
			if ch.ret < rec.inv {
				lo++
			}
			if ch.inv < rec.ret {
				hi++
			}
		}
		for v := lo; v <= hi; v++ {
			if caps[v] == rec.d.Limit {
				vs = append(vs, v)
			}
		}
		return lo, hi, vs
	}
	type seen struct {
		rec *crec
		min int
	}
	byKey := map[string][]seen{}
	var decs []*crec
	for _, rec := range recs {
		if decided(rec) || (rec.eff == effAllow || rec.eff == effReserve) && rec.noEffect && rec.d.Limit > 0 {
			decs = append(decs, rec)
		}
	}
	sort.Slice(decs, func(i, j int) bool { return decs[i].ret < decs[j].ret })
	for _, rec := range decs {
		lo, hi, vs := versions(rec)
		if len(vs) == 0 {
			return &failure{kind: failRate, msg: fmt.Sprintf("%v\nreports Limit %d, which no rate in force between its call and its return has (rates %d..%d of the changes below have limits %v)\n%s",
				rec, rec.d.Limit, lo, hi, caps[lo:hi+1], recordList(changes))}
		}
		for _, s := range byKey[rec.key] {
			if s.rec.ret < rec.inv && vs[len(vs)-1] < s.min {
				return &failure{kind: failRate, msg: fmt.Sprintf("%v\nis decided under rate %d (Limit %d), older than the rate %d its key was decided under by\n%v\nwhich returned before it was called\n%s",
					rec, vs[len(vs)-1], rec.d.Limit, s.min, s.rec, recordList(changes))}
			}
		}
		if rec.n > 0 && !rec.noEffect {
			// A report or a refused cost writes nothing: a store whose
			// instances learn a change one by one (Redis) may answer it
			// under a newer view than the key's state is in.
			byKey[rec.key] = append(byKey[rec.key], seen{rec, vs[0]})
		}
	}
	return nil
}

// takes returns the allowed takes of slots in recs, and for each the
// release that settles it.
func takes(recs []*crec) (calls []*crec, released map[*crec]*crec) {
	released = map[*crec]*crec{}
	for _, rec := range recs {
		switch {
		case rec.eff == effAllow && rec.n > 0 && (decided(rec) && rec.d.Allowed || rec.unknown):
			calls = append(calls, rec)
		case rec.eff == effRelease && rec.call != nil:
			released[rec.call] = rec
		}
	}
	return calls, released
}

// checkInFlightTable: a per-key in-flight limit denies a call as
// Overloaded only while MaxKeys keys hold slots.
func (r *run) checkInFlightTable(recs []*crec) *failure {
	if r.c.Algorithm != InFlightSlots || r.c.MaxKeys <= 0 || r.serviceWide() {
		return nil
	}
	calls, released := takes(recs)
	for _, rec := range recs {
		if !decided(rec) || rec.d.Allowed || !rec.d.Overloaded || rec.n == 0 {
			continue
		}
		holders := map[string]bool{}
		for _, c := range calls {
			rel := released[c]
			if c.key != rec.key && c.inv < rec.ret && (rel == nil || rel.ret > rec.inv) {
				holders[c.key] = true
			}
		}
		if len(holders) < r.c.MaxKeys {
			return &failure{kind: failTable, msg: fmt.Sprintf("%v\nwhile at most %d other keys held slots; WithMaxKeys is %d", rec, len(holders), r.c.MaxKeys)}
		}
	}
	return nil
}

// checkSlotLeases: the slots a decision reports held are held by calls
// that have not released them, or were taken by calls whose caller gave
// up less than a lease ago (two, for the renewal's slack).
func (r *run) checkSlotLeases(recs []*crec) *failure {
	lease := r.c.SlotLease
	if r.c.Algorithm != InFlightSlots || lease <= 0 {
		return nil
	}
	calls, released := takes(recs)
	for _, rec := range recs {
		if !decided(rec) || rec.d.Overloaded && !r.serviceWide() {
			continue
		}
		live, gone := 0, 0
		for _, c := range calls {
			if r.partitionKey(c) != r.partitionKey(rec) || c.inv > rec.ret {
				continue
			}
			rel := released[c]
			switch {
			case c.unknown && c.r0 > rec.r0-2*lease:
				gone += c.n
			case !c.unknown && (rel == nil || rel.ret > rec.inv || rel.unknown && rel.r0 > rec.r0-2*lease):
				live += c.n
			}
		}
		if held := rec.d.Limit - rec.d.Remaining; held > live+gone {
			return &failure{kind: failSlotLease, msg: fmt.Sprintf("%v\nreports %d slots held, while calls hold at most %d and calls abandoned within two leases (%v) took at most %d",
				rec, held, live, 2*lease, gone)}
		}
	}
	return nil
}

// checkResets: a key reset and not spent since is allowed any cost
// within its capacity (Reset is durable, evictions and debt memory
// notwithstanding).
func (r *run) checkResets(recs []*crec) *failure {
	if !r.c.caps.reset || r.c.Algorithm == InFlightSlots {
		return nil
	}
	byKey := map[string][]*crec{}
	for _, rec := range recs {
		if rec.key != "" {
			byKey[rec.key] = append(byKey[rec.key], rec)
		}
	}
	for _, rec := range recs {
		if rec.eff != effReset || rec.unknown || rec.err != nil {
			continue
		}
	next:
		for _, d := range byKey[rec.key] {
			if !decided(d) || busy(d, r.c.Algorithm) || d.inv < rec.ret || d.d.Allowed || d.n == 0 || d.n > d.d.Limit {
				continue
			}
			if r.c.DenyCache > 0 && d.inst != rec.inst && d.t0 < rec.t1+r.c.DenyCache {
				continue
			}
			for _, c := range byKey[rec.key] {
				spends := c.eff == effAllow || c.eff == effReserve || c.eff == effCharge
				if c != d && spends && c.n > 0 && c.inv < d.ret && c.ret > rec.inv {
					continue next
				}
			}
			for _, c := range recs { // a change of rate may leave a fresh key any capacity
				if c.eff == effSetRate && c.inv < d.ret && c.ret > rec.inv {
					continue next
				}
			}
			if r.laterDebt(recs, rec, d) {
				continue
			}
			return &failure{kind: failReset, msg: fmt.Sprintf("%v\nafter\n%v\nwith nothing spent on the key in between", d, rec)}
		}
	}
	return nil
}

// lostLeases returns the leases of running calls the instances say they
// lost (a LostLeases method, as redisstore.InFlight has), for a limiter
// with a SlotLease.
func (r *run) lostLeases() uint64 {
	if r.c.SlotLease <= 0 {
		return 0
	}
	var n uint64
	for _, inst := range r.insts {
		if l, ok := inst.lim.(interface{ LostLeases() uint64 }); ok {
			n += l.LostLeases()
		}
	}
	return n
}

// laterDebt reports whether d, a denial of a key reset by reset and not
// spent since, may come from debts of other keys spent after the reset,
// for a store that may lock a key out by design (Lossy, negative
// Shortfall): past its debt memory's size such a store merges debts into
// a bound that binds every key of their place, a key reset before them
// as any new key (docs/store.md), while no debt running at the reset may
// bind the key again. A bound lasts as long as its latest debt: a denial
// whose RetryAfter ends after every debt spent since the reset must owe
// something to one older than the reset. (RetryAfter, not ResetAfter: a
// log that counts denied attempts counts the denial itself; and its
// denials of other keys are debts too.) Its time may be rounded up: the
// debt memory keeps a debt under pressure in one word, its time later by
// less than 2^-15 of how far it lies beyond a base at most 2^30 ns old,
// or 2^13 ns (floodgate's debts.go; a bucket whose periods began at
// other times is bound up to that time).
func (r *run) laterDebt(recs []*crec, reset, d *crec) bool {
	if !r.c.Lossy || r.c.Shortfall >= 0 {
		return false
	}
	end := d.t0 + d.d.RetryAfter - r.c.Resolution - debtRounding(d.d.RetryAfter)
	for _, c := range recs {
		spent := c.d.Allowed || r.c.CountDenied // a log that counts denied attempts records them too
		if c.key != reset.key && decided(c) && spent && c.n > 0 && c.inv > reset.inv && c.inv < d.ret &&
			c.t1+c.d.ResetAfter >= end {
			return true
		}
	}
	return false
}

// debtRounding bounds how much later than its debt a bound the debt
// memory rounded up ends, for a denial whose RetryAfter is wait: less
// than 2^-15 of the debt's distance from the memory's base (at most
// wait and 2^30 ns), and at least 2^13 ns (see laterDebt).
func debtRounding(wait time.Duration) time.Duration {
	return max(1<<13, (wait+1<<30)>>15)
}

// checkShortfall: a Lossy limiter denies a steady key no more units over
// the run than its stated Shortfall.
func (r *run) checkShortfall(recs []*crec) *failure {
	if !r.c.Lossy || r.c.Shortfall < 0 {
		return nil
	}
	denied := map[string][]*crec{}
	for _, rec := range recs {
		if strings.HasPrefix(rec.key, "s") && decided(rec) && !rec.d.Allowed && rec.n > 0 {
			denied[rec.key] = append(denied[rec.key], rec)
		}
	}
	keys := make([]string, 0, len(denied))
	for k := range denied {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if os.Getenv("FLOODGATE_CHECK_DEBUG") != "" {
		for _, k := range keys {
			r.log.Logf("steady key %s: %d units denied", k, len(denied[k]))
		}
	}
	for _, k := range keys {
		if ds := denied[k]; len(ds) > r.c.Shortfall {
			return &failure{kind: failShortfall, msg: fmt.Sprintf("steady key %s (at 89 %% of its quota, at most a sixteenth of the limit at once) was denied %d units over the run, more than Shortfall %d:\n%s",
				k, len(ds), r.c.Shortfall, recordList(ds))}
		}
	}
	return nil
}

// checkLinearizable runs the linearizability check on each key's
// history.
func (r *run) checkLinearizable(recs []*crec, ticks []time.Duration) *failure {
	l := &linearizer{c: r.c, ticks: ticks, budget: linearBudget, staleOK: r.staleDenials(recs)}
	parts := map[string][]*crec{}
	var changes []*crec
	for _, rec := range recs {
		switch rec.eff {
		case effSetRate:
			if !rec.noEffect {
				changes = append(changes, rec)
			}
			continue
		case effSetPlan:
			continue
		}
		if strings.HasPrefix(rec.key, "u") || strings.HasPrefix(rec.key, "x") {
			continue // no plan; a key sprayed once
		}
		if rec.noEffect && !(rec.eff == effAllow || rec.eff == effReserve) || rec.noEffect && !isCostError(rec.err) {
			continue
		}
		if r.c.RateChangeOnNextDecision && rec.noEffect {
			// A refused cost reads no state of its key, and an instance
			// that learns a change of rate on its own (Redis) refuses it
			// by the rate it last read, older or newer than the key's
			// state: it orders nothing, and its Limit is checkRates' to
			// judge.
			if rec.d.Allowed || rec.n <= rec.d.Limit {
				return &failure{kind: failLinear, msg: fmt.Sprintf("%v\nrefuses a cost its own Limit allows", rec)}
			}
			continue
		}
		k := r.partitionKey(rec)
		parts[k] = append(parts[k], rec)
	}
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ops := append(append([]*crec(nil), parts[k]...), changes...)
		sort.Slice(ops, func(i, j int) bool { return ops[i].inv < ops[j].inv })
		res := l.check(ops)
		if res.gaveUp {
			r.log.Logf("%s: the search for a linearization of key %q gave up after %d states (%d calls)", r.c.Name, k, res.explored, len(ops))
			continue
		}
		if !res.ok {
			return &failure{kind: failLinear, msg: fmt.Sprintf("key %s, %d calls:\n%s%s", k, len(ops), recordList(ops), l.explain(ops, res))}
		}
	}
	return nil
}

func isCostError(err error) bool {
	return err != nil && (errors.Is(err, floodgate.ErrCostExceedsLimit))
}

// staleDenials returns the denials a deny cache may give from an entry
// older than a Reset or refund of their key on another instance.
func (r *run) staleDenials(recs []*crec) map[*crec]bool {
	out := map[*crec]bool{}
	if r.c.DenyCache <= 0 {
		return out
	}
	byKey := map[string][]*crec{}
	for _, rec := range recs {
		if rec.eff == effRefund || rec.eff == effReset {
			byKey[rec.key] = append(byKey[rec.key], rec)
		}
	}
	for _, rec := range recs {
		if !decided(rec) || rec.d.Allowed {
			continue
		}
		for _, x := range byKey[rec.key] {
			if x.inst != rec.inst && x.inv < rec.ret && rec.t0 < x.t1+r.c.DenyCache {
				out[rec] = true
				break
			}
		}
	}
	return out
}

// recordList prints recs, one a line, the first and last ones if there
// are many.
func recordList(recs []*crec) string {
	var b strings.Builder
	for i, rec := range recs {
		if len(recs) > maxShownCalls && i == maxShownCalls/2 {
			fmt.Fprintf(&b, "\t... %d more ...\n", len(recs)-maxShownCalls)
		}
		if len(recs) > maxShownCalls && i >= maxShownCalls/2 && i < len(recs)-maxShownCalls/2 {
			continue
		}
		fmt.Fprintf(&b, "\t%v\n", rec)
	}
	return b.String()
}
