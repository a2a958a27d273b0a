package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// OverSpend is the attack of a client whose calls always cost more than
// they announce, run against a limiter that charges the cost known after
// the call (floodgate.Charger): every Period/10 it sends Calls calls at
// once, each estimated 1 and costing Cost, through an admission core
// (floodgate.WithSettledCost), every one admitted before any settles —
// the most a client can have in flight. Over any run the units it gets
// per Period must average the limit, plus what the calls in flight when
// its quota ran out over-spent (InFlightBound): a bound that restarts
// every window is no bound.
type OverSpend struct {
	Limit, Calls, Cost int
	Period             time.Duration
	Periods            int // the run's length
}

// InFlightBound is what the calls in flight when the quota runs out can
// over-spend at most: each needs its estimate of 1 in hand to start, so
// at most Limit of them run, each costing Cost-1 more.
func (o OverSpend) InFlightBound() int { return o.Limit * (o.Cost - 1) }

// OverSpendResult is what a run admitted.
type OverSpendResult struct {
	Admitted int // calls admitted in all
	Cost     int // their real cost in all
	// FirstWait is the Retry-After of the first call denied once the
	// first round had settled: the wait the first over-spend costs.
	FirstWait time.Duration
}

// PerPeriod is the admitted cost per Period of the run.
func (r OverSpendResult) PerPeriod(o OverSpend) float64 {
	return float64(r.Cost) / float64(o.Periods)
}

// Run drives the attack on l, whose clock advance moves; it fails t if
// the admitted cost exceeds Periods·Limit + Limit (the first window's
// quota, spent at once) + InFlightBound, over the whole run and over
// every prefix of it that ends at a round.
func (o OverSpend) Run(t *testing.T, l floodgate.Limiter, advance func(time.Duration)) OverSpendResult {
	t.Helper()
	sel, err := floodgate.NewSelectorFor(floodgate.PolicyFor[int]{Name: "api", Limiter: l,
		Key: func(int) (string, error) { return "attacker", nil }})
	if err != nil {
		t.Fatal(err)
	}
	g, err := floodgate.NewGate(sel, floodgate.WithSettledCost())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var res OverSpendResult
	step := o.Period / 10
	for round := 0; round < o.Periods*10; round++ {
		outs := make([]floodgate.Outcome, o.Calls)
		var admitted, wg sync.WaitGroup
		admitted.Add(o.Calls)
		wg.Add(o.Calls)
		for i := range o.Calls {
			go func() {
				defer wg.Done()
				outs[i] = g.Admit(ctx, sel.Call(i))
				admitted.Done()
				admitted.Wait() // every call admitted before any settles
				if outs[i].NeedsSettle {
					g.Settle(ctx, outs[i], floodgate.Result{Cost: o.Cost, CostKnown: true})
				}
			}()
		}
		wg.Wait()
		for _, out := range outs {
			switch {
			case out.Err != nil && out.Kind != floodgate.OutcomeDenied:
				t.Fatalf("round %d: %s: %v", round, out.Kind, out.Err)
			case out.Kind == floodgate.OutcomeAllowed:
				res.Admitted++
				res.Cost += o.Cost
			case round == 1 && res.FirstWait == 0:
				res.FirstWait = out.Decision.RetryAfter
			}
		}
		elapsed := round/10 + 1 // periods begun
		if most := elapsed*o.Limit + o.Limit + o.InFlightBound(); res.Cost > most {
			t.Fatalf("after %d periods: admitted cost %d, more than %d (the limit %d a period, a first window, and %d in flight)",
				elapsed, res.Cost, most, o.Limit, o.InFlightBound())
		}
		advance(step)
	}
	if res.Admitted == 0 {
		t.Fatal("nothing admitted: the run tests nothing")
	}
	t.Logf("%d periods: %d calls admitted, cost %d, %.1f a period (limit %d); first denial's Retry-After %v",
		o.Periods, res.Admitted, res.Cost, res.PerPeriod(o), o.Limit, res.FirstWait)
	return res
}

// SameMagnitude fails t unless the waits are within a factor of 2 of one
// another: the same over-spend answered with the same order of wait,
// whatever the algorithm.
func SameMagnitude(t *testing.T, waits map[string]time.Duration) {
	t.Helper()
	var lo, hi time.Duration
	for _, w := range waits {
		if w <= 0 {
			t.Fatalf("waits %v: a denial without a wait", waits)
		}
		if lo == 0 || w < lo {
			lo = w
		}
		hi = max(hi, w)
	}
	if hi > 2*lo {
		t.Errorf("waits %v: the longest is more than twice the shortest", waits)
	}
	t.Log(fmt.Sprintf("Retry-After after the first over-spend: %v", waits))
}
