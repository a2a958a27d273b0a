package floodgatetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate"
)

// step is one request of a scripted timeline.
type step struct {
	note string
	key  string // label of one of the timeline's keys
	// wait returns how long to move the clock before the request, given
	// the last decision on the same key.
	wait func(last floodgate.Decision) time.Duration
	n    int
}

func after(d time.Duration) func(floodgate.Decision) time.Duration {
	return func(floodgate.Decision) time.Duration { return d }
}

// retryAfter waits for the last decision's RetryAfter plus offset.
func retryAfter(offset time.Duration) func(floodgate.Decision) time.Duration {
	return func(last floodgate.Decision) time.Duration { return max(0, last.RetryAfter+offset) }
}

// resetAfter waits for the last decision's ResetAfter plus offset.
func resetAfter(offset time.Duration) func(floodgate.Decision) time.Duration {
	return func(last floodgate.Decision) time.Duration { return max(0, last.ResetAfter+offset) }
}

// timelineScript walks one configuration through its boundaries: a burst,
// the moments just before and at RetryAfter and ResetAfter, costs above
// what is left and above the capacity, and steady streams faster than and
// at the rate. The model supplies the expected decision of every step.
func timelineScript(c setup) []step {
	const ms = time.Millisecond
	period, capacity := c.rate.Period, c.capacity()
	tick := period / time.Duration(c.rate.Limit) // one token's refill time
	var s []step
	add := func(times int, note, key string, wait func(floodgate.Decision) time.Duration, n int) {
		for i := 0; i < times; i++ {
			s = append(s, step{note, key, wait, n})
		}
	}
	add(1, "a fresh key reports its full quota", "a", after(0), 0)
	add(capacity, "the whole quota at one instant", "a", after(0), 1)
	add(1, "one more is denied", "a", after(0), 1)
	add(1, "1ms before RetryAfter it is still denied", "a", retryAfter(-ms), 1)
	add(1, "at RetryAfter it is allowed", "a", retryAfter(0), 1)
	add(1, "a report changes nothing", "a", after(0), 0)
	add(1, "half a period later, two at once", "a", after(whole(period/2)), min(2, capacity))
	add(1, "another key has its own quota", "b", after(0), capacity)
	add(1, "a third of a period later", "a", after(whole(period/3)), 1)
	add(1, "1ms before ResetAfter the quota is not full", "a", resetAfter(-ms), 0)
	add(1, "at ResetAfter it is", "a", resetAfter(0), 0)
	add(1, "the whole quota in one request", "a", after(0), capacity)
	add(1, "more than the capacity is an error", "a", after(0), capacity+1)
	add(1, "and consumed nothing", "a", after(0), 0)
	add(2*capacity+2, "a stream faster than the rate", "a", after(whole(tick*3/4)), 1)
	add(capacity+1, "a stream at the rate", "a", after(whole(tick)+ms), 1)
	add(1, "more than what is left", "a", after(0), capacity)
	add(1, "at its RetryAfter", "a", retryAfter(0), capacity)
	add(1, "the other key, long idle", "b", after(3*period), 0)
	return s
}

// checkTimeline runs the scripted timeline and compares every decision
// with the model.
func checkTimeline(e *env) {
	keys := map[string]string{"a": e.key("a"), "b": e.key("b")}
	last := map[string]floodgate.Decision{}
	for i, st := range timelineScript(e.cfg) {
		key := keys[st.key]
		e.advance(st.wait(last[key]))
		e.step = fmt.Sprintf("step %d (%s)", i, st.note)
		last[key], _ = e.allow(key, st.n)
	}
}

// randomSeeds are fixed so that a failure reproduces.
var randomSeeds = []uint64{1, 2, 3}

const randomSteps = 300

// checkRandomTraffic drives three keys with random costs, waits (many of
// them at exactly RetryAfter or ResetAfter, or 1ms before) and resets,
// from fixed seeds, comparing every decision with the model where there is
// one and with the rules of every decision otherwise.
func checkRandomTraffic(e *env) {
	capacity := e.cfg.capacity()
	tick := e.cfg.rate.Period / time.Duration(e.cfg.rate.Limit)
	for _, seed := range randomSeeds {
		rng := rand.New(rand.NewPCG(seed, 0xf100d9a7e))
		keys := []string{e.key("r0"), e.key("r1"), e.key("r2")}
		last := map[string]floodgate.Decision{}
		for i := 0; i < randomSteps; i++ {
			e.step = fmt.Sprintf("seed %d, step %d", seed, i)
			key := keys[min(rng.IntN(4), 2)] // r2 gets half the traffic
			switch x := rng.IntN(100); {
			case x < 35:
				e.advance(whole(time.Duration(rng.Int64N(int64(2*tick)) + 1)))
			case x < 45:
				e.advance(last[key].RetryAfter)
			case x < 50:
				e.advance(max(0, last[key].RetryAfter-time.Millisecond))
			case x < 53:
				e.advance(last[key].ResetAfter)
			case x < 55:
				e.advance(whole(time.Duration(rng.Int64N(int64(3 * e.cfg.rate.Period)))))
			}
			var n int
			switch x := rng.IntN(100); {
			case x < 2:
				e.reset(key)
				last[key] = floodgate.Decision{}
				continue
			case x < 5:
				n = capacity + 1
			case x < 15:
				n = 0
			case x < 30:
				n = 1 + rng.IntN(capacity)
			default:
				n = 1
			}
			last[key], _ = e.allow(key, n)
		}
	}
}
