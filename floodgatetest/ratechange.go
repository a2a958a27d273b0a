package floodgatetest

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// rateChange is one change of rate the suite made: when, to what, and
// what the keys inherit.
type rateChange struct {
	at  time.Duration
	to  setup
	how floodgate.Inherit
}

// strategies are the inheritance strategies every change is tried with.
var strategies = []floodgate.Inherit{floodgate.KeepUsed, floodgate.ScaleUsed, floodgate.AddDifference, floodgate.StartFresh}

// changeTargets returns the rates a limiter of setup c is changed to: an
// upgrade and a downgrade of the quota, a longer and a shorter period,
// and for a token bucket a burst of its own.
func (s *Suite) changeTargets(c setup) []setup {
	scale := func(limit, period int) setup {
		r := floodgate.Rate{Limit: max(c.rate.Limit*limit/2, 1), Period: whole(c.rate.Period * time.Duration(period) / 2)}
		t := setup{rate: r}
		if c.burst > 0 {
			t.burst = max(c.burst*limit/2, 1)
		}
		return t
	}
	out := []setup{scale(4, 2), scale(1, 2), scale(2, 6), scale(2, 1)}
	if s.Algorithm.bucket() {
		out = append(out, setup{rate: c.rate, burst: c.burst + 3})
	}
	return out
}

// checkRateChange changes the rate of a limiter that is serving
// (floodgate.RateSetter) under every strategy to every target, and back,
// and compares every decision before, between and after with the models.
// Keys in every state meet each change: half spent, drained and denied,
// spent once a while ago, and never used.
func checkRateChange(e *env) {
	if _, ok := e.lim.(floodgate.RateSetter); !ok {
		e.t.Skip("the limiter does not implement floodgate.RateSetter")
	}
	from := e.cfg
	for _, how := range strategies {
		for _, to := range e.suite.changeTargets(from) {
			e.t.run(fmt.Sprintf("%v/to_%v", how, to), func(t tester) {
				e.suite.newEnv(t, e.keys, from).changeScript(to, how)
			})
		}
	}
}

// changeScript walks one change and its undoing.
func (e *env) changeScript(to setup, how floodgate.Inherit) {
	from := e.cfg
	keys := map[string]string{}
	for _, label := range []string{"half", "drained", "once", "unused"} {
		keys[label] = e.key(label)
	}
	e.step = "before the change"
	e.takeSome(keys["once"], 1)
	e.advance(whole(from.rate.Period / time.Duration(from.rate.Limit) / 2))
	e.takeSome(keys["half"], max(from.capacity()/2, 1))
	e.takeSome(keys["drained"], from.capacity())
	e.allow(keys["drained"], 1)
	e.advance(time.Millisecond)

	e.setRate(to, how)
	e.step = fmt.Sprintf("after the change to %v under %v", to, how)
	e.afterChange(keys)

	e.advance(whole(to.rate.Period / 3))
	e.setRate(from, how)
	e.step = fmt.Sprintf("after the change back to %v under %v", from, how)
	e.afterChange(keys)
}

// afterChange reports every key, then drives them through the new rate's
// boundaries: a retry at RetryAfter, a cost of the whole capacity, a wait
// for ResetAfter.
func (e *env) afterChange(keys map[string]string) {
	for _, label := range []string{"half", "drained", "once", "unused"} {
		e.allow(keys[label], 0)
	}
	capacity := e.cfg.capacity()
	d, _ := e.allow(keys["drained"], 1)
	if !d.Allowed {
		e.advance(d.RetryAfter)
		e.allow(keys["drained"], 1)
	}
	e.takeSome(keys["unused"], capacity)
	e.allow(keys["half"], min(2, capacity))
	d, _ = e.allow(keys["once"], capacity)
	if !d.Allowed {
		e.advance(d.RetryAfter)
		e.allow(keys["once"], capacity)
	}
	d, _ = e.allow(keys["half"], 0)
	e.advance(d.ResetAfter)
	e.allow(keys["half"], 0)
	e.allow(keys["unused"], 1)
}

// takeSome asks for n units one at a time, each compared with the model.
func (e *env) takeSome(key string, n int) {
	for range n {
		e.allow(key, 1)
	}
}

// setRate changes the limiter's rate to c and tells the models: every one
// at once, or each when its key is next decided for
// (Suite.RateChangeOnNextDecision).
func (e *env) setRate(c setup, how floodgate.Inherit) {
	e.t.Helper()
	rc := floodgate.RateChange{Rate: c.rate, Burst: c.burst, Inherit: how}
	if err := e.lim.(floodgate.RateSetter).SetRate(e.ctx, rc); err != nil {
		e.t.Fatalf("SetRate(%+v): %v", rc, err)
	}
	e.version++
	e.pending = rateChange{at: e.now(), to: c, how: how}
	if !e.suite.RateChangeOnNextDecision {
		for key, m := range e.models {
			m.change(e.now(), c, how)
			e.versions[key] = e.version
		}
	}
	e.cfg = c
}
