package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The cases of the admission kinds beyond a rate: in-flight slots, the
// cost known after the response, and waiting for a turn.

// held returns l with one slot of holder taken.
func held(l floodgate.Limiter, holder string) floodgate.Limiter {
	if d, _ := l.AllowN(context.Background(), holder, 1); !d.Allowed {
		panic("conformance: could not take the holder's slot")
	}
	return l
}

// instantTimer is a wait timer that fires at once: a case sees the wait
// in the decision events (Waited) without sleeping it.
func instantTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c := make(chan time.Time, 1)
	c <- T0.Add(d)
	return c, func() bool { return false }
}

// holdFirst returns a wait timer that never fires for the first call that
// waits, signalling deciding instead, and fires at once for the others.
func holdFirst(deciding chan struct{}) func(time.Duration) (<-chan time.Time, func() bool) {
	first := true
	return func(d time.Duration) (<-chan time.Time, func() bool) {
		if !first {
			return instantTimer(d)
		}
		first = false
		deciding <- struct{}{}
		return make(chan time.Time), func() bool { return true }
	}
}

func kindCases(s Store) []Case {
	bucket := s.Bucket
	waitAnHour := &floodgate.WaitLimits{MaxWait: time.Hour, PerKey: 1, Total: 1}
	return []Case{
		{
			Name:  "in-flight: a call's slot comes back when it ends, also after a failure and a panic",
			Setup: func() Setup { return Setup{Limiter: s.InFlight(1, false)} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Panic, Want: Panicked},
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Fail, Want: Failed},
				{Client: "ann", Action: Succeed, Want: OK},
			},
			Runs:  5,
			Event: allBlocked(false),
		},
		{
			Name:  "in-flight: a key holding all its slots is denied, with an estimate to retry after",
			Setup: func() Setup { return Setup{Limiter: held(s.InFlight(1, false), "ann")} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: time.Second},
				{Client: "bob", Action: Succeed, Want: OK},
			},
			Runs: 1,
		},
		{
			Name:  "in-flight: a service-wide cap refuses as a busy service, not as the client's limit",
			Setup: func() Setup { return Setup{Limiter: held(s.InFlight(1, true), "someone")} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: Overloaded, RetryAfter: time.Second},
				{Client: "bob", Action: Succeed, Want: Overloaded, RetryAfter: time.Second},
			},
			Runs:  0,
			Event: allOverloaded,
		},
		{
			Name:  "cost after: the reported cost is charged, and the debt waited out",
			Setup: func() Setup { return Setup{Limiter: bucket(10), CostAfter: true} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Cost: 11, Want: OK},
				// 11 charged on a quota of 10: 1 owed, and 1 more needed.
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: 2 * 6 * time.Minute},
				{Client: "bob", Action: Succeed, Want: OK},
			},
			Runs:  2,
			Event: charged(10, false),
		},
		{
			Name:  "cost after: a panicking handler is charged what it reported",
			Setup: func() Setup { return Setup{Limiter: bucket(10), CostAfter: true} },
			Steps: []Step{
				{Client: "ann", Action: Panic, Cost: 11, Want: Panicked},
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: 2 * 6 * time.Minute},
			},
			Runs:  1,
			Event: charged(10, false),
		},
		{
			// The default debt limits: one call adds an hour's refill at
			// most, here the quota of 10; the rest of 99 is forgiven, and
			// the settlement says so.
			Name:  "cost after: a cost beyond the debt limit per call is charged up to it",
			Setup: func() Setup { return Setup{Limiter: bucket(10), CostAfter: true} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Cost: 100, Want: OK},
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: 2 * 6 * time.Minute},
			},
			Runs:  1,
			Event: charged(99, true),
		},
		{
			Name:  "waiting: held for its turn instead of denied; a turn beyond the maximum wait is denied",
			Setup: func() Setup { return Setup{Limiter: bucket(2), Wait: waitAnHour, Timer: instantTimer} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Succeed, Want: OK}, // after 30 min
				{Client: "ann", Action: Succeed, Want: OK}, // after 60 min
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: 90 * time.Minute},
			},
			Runs:  4,
			Event: waited(0, 0, 30*time.Minute, time.Hour, 0),
		},
		{
			Name: "waiting: the gate's stats count a call while it waits for its turn (WithGateStats)",
			Setup: func() Setup {
				stats := &floodgate.GateStats{}
				var mu sync.Mutex
				var seen []int // stats.Waiting() as each call went to sleep
				timer := func(d time.Duration) (<-chan time.Time, func() bool) {
					mu.Lock()
					seen = append(seen, stats.Waiting())
					mu.Unlock()
					return instantTimer(d)
				}
				check := func() error {
					mu.Lock()
					defer mu.Unlock()
					if fmt.Sprint(seen) != "[1 1]" || stats.Waiting() != 0 || stats.Gates() == 0 {
						return fmt.Errorf("the stats saw %v waiting as each call slept and %d after (%d gates), want [1 1] and 0", seen, stats.Waiting(), stats.Gates())
					}
					return nil
				}
				return Setup{Limiter: bucket(2), Wait: waitAnHour, Timer: timer, Stats: stats, Check: check}
			},
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Succeed, Want: OK}, // after 30 min
				{Client: "ann", Action: Succeed, Want: OK}, // after 60 min
			},
			Runs:  4,
			Event: waited(0, 0, 30*time.Minute, time.Hour),
		},
		{
			Name: "waiting: a client that hangs up while waiting gives its turn back",
			Setup: func() Setup {
				deciding := make(chan struct{}, 1)
				return Setup{Limiter: bucket(1), Wait: waitAnHour, Timer: holdFirst(deciding), Deciding: deciding}
			},
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Succeed, HangUp: true, Want: HungUp},
				// Its turn, an hour off, was given back: this call gets it,
				// rather than one two hours off, beyond the maximum wait.
				{Client: "ann", Action: Succeed, Want: OK},
			},
			Runs: 2,
		},
	}
}

// allOverloaded checks that there are events, each a blocked denial
// marked Overloaded.
func allOverloaded(evs []floodgate.DecisionEvent) error {
	if len(evs) == 0 {
		return fmt.Errorf("no decision event")
	}
	for _, ev := range evs {
		if !ev.Blocked || ev.Decision.Allowed || !ev.Decision.Overloaded {
			return fmt.Errorf("event %+v: want a blocked denial marked Overloaded", ev)
		}
	}
	return nil
}

// charged checks that the settlements charged n units beyond the
// estimates in all, in one AfterHandler event, capped by the key's debt
// limit or not.
func charged(n int, capped bool) func([]floodgate.DecisionEvent) error {
	return func(evs []floodgate.DecisionEvent) error {
		var after []floodgate.DecisionEvent
		for _, ev := range evs {
			if ev.AfterHandler {
				after = append(after, ev)
			}
		}
		if len(after) != 1 || after[0].Charged != n || after[0].Err != nil || after[0].DebtCapped != capped {
			return fmt.Errorf("settlement events %+v, want one charging %d, capped %v", after, n, capped)
		}
		return nil
	}
}

// waited checks the waits of the decision events, in order.
func waited(waits ...time.Duration) func([]floodgate.DecisionEvent) error {
	return func(evs []floodgate.DecisionEvent) error {
		got := make([]time.Duration, len(evs))
		for i, ev := range evs {
			got[i] = ev.Waited
		}
		if fmt.Sprint(got) != fmt.Sprint(waits) {
			return fmt.Errorf("waits %v, want %v", got, waits)
		}
		return nil
	}
}
