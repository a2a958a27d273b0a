package floodgatetest

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The checks in this file hold for every algorithm; where a statement is
// exact only for the algorithms with a model (a wait that is also the
// shortest), they test it only for those.

// whole floors d to a whole millisecond: the suite moves its clock on a
// millisecond grid so that a store rounding event times to a finer unit
// records them exactly.
func whole(d time.Duration) time.Duration { return d.Truncate(time.Millisecond) }

// costs returns 1, 2 and the whole capacity, without repeats.
func costs(capacity int) []int {
	out := []int{1}
	if capacity >= 2 {
		out = append(out, 2)
	}
	if capacity > 2 {
		out = append(out, capacity)
	}
	return out
}

// takeAll requires exactly want single units of key to be allowed at the
// current instant, and the next one denied.
func (e *env) takeAll(key string, want int) {
	e.t.Helper()
	for i := 0; i < want; i++ {
		e.mustAllow(key, 1)
	}
	e.mustDeny(key, 1)
}

// drain takes single units of key until one is denied.
func (e *env) drain(key string) {
	e.t.Helper()
	for i := 0; i <= e.cfg.capacity(); i++ {
		if d, _ := e.allow(key, 1); !d.Allowed {
			return
		}
	}
	e.t.Fatalf("%s: more than the capacity %d allowed at one instant", e.where(key, 1), e.cfg.capacity())
}

// checkRetryAfter: a denied request retried after exactly RetryAfter
// succeeds, and 1ms earlier it is still denied (RetryAfter is the shortest
// wait), for the exact algorithms with RetryAfter 1ms.
func checkRetryAfter(e *env) {
	key := e.key("retry")
	// Spread the quota over time, so that the event that must age out is
	// not simply the first one.
	e.mustAllow(key, 1)
	e.advance(whole(e.cfg.rate.Period / 4))
	for _, n := range costs(e.cfg.capacity()) {
		e.drain(key)
		d := e.mustDeny(key, n)
		wait := d.RetryAfter
		if wait > time.Millisecond {
			e.advance(wait - time.Millisecond)
			if d := e.mustDeny(key, n); e.exact() && d.RetryAfter != time.Millisecond {
				e.t.Errorf("%s: RetryAfter %v 1ms before the retry time, want 1ms", e.where(key, n), d.RetryAfter)
			}
			wait = time.Millisecond
		}
		e.advance(wait)
		e.mustAllow(key, n)
	}
}

// checkResetAfter: after ResetAfter a key has its whole quota again; for
// the exact algorithms, 1ms earlier it does not.
func checkResetAfter(e *env) {
	key := e.key("reset-after")
	e.mustAllow(key, 1)
	e.advance(whole(e.cfg.rate.Period / 3))
	e.drain(key)
	d, _ := e.allow(key, 0)
	if d.ResetAfter <= 0 {
		e.t.Fatalf("%s: ResetAfter %v on a drained key, want a positive wait", e.where(key, 0), d.ResetAfter)
	}
	wait := d.ResetAfter
	if e.exact() && wait > time.Millisecond {
		e.advance(wait - time.Millisecond)
		if d, _ := e.allow(key, 0); d.Remaining == e.cfg.capacity() {
			e.t.Errorf("%s: full quota 1ms before ResetAfter: %+v", e.where(key, 0), d)
		}
		wait = time.Millisecond
	}
	e.advance(wait)
	e.mustFull(key)
	e.takeAll(key, e.cfg.capacity())
}

// checkCostExceedsLimit: a cost above the capacity is an error wrapping
// floodgate.ErrCostExceedsLimit, never allowed, with no RetryAfter, and
// consumes nothing; a cost within the capacity is an ordinary denial.
func checkCostExceedsLimit(e *env) {
	key := e.key("too-much")
	c := e.cfg.capacity()
	for _, n := range []int{c + 1, 2*c + 1, math.MaxInt32} {
		_, _ = e.allow(key, n) // checkDecision holds the rules for these
	}
	e.mustFull(key)
	e.mustAllow(key, 1)
	_, _ = e.allow(key, c+1)
	if d := e.mustDeny(key, c); d.RetryAfter == never {
		e.t.Errorf("%s: a request within the capacity got RetryAfter %v", e.where(key, c), d.RetryAfter)
	}
}

// checkNegativeCost: a negative cost is an error wrapping
// floodgate.ErrInvalidCost and consumes nothing.
func checkNegativeCost(e *env) {
	key := e.key("negative")
	_, _ = e.allow(key, -1)
	_, _ = e.allow(key, math.MinInt32)
	e.mustFull(key)
	e.mustAllow(key, 1)
	_, _ = e.allow(key, -1)
	if d, _ := e.allow(key, 0); d.Remaining != e.cfg.capacity()-1 {
		e.t.Errorf("%s: Remaining %d after one unit and a negative cost, want %d",
			e.where(key, 0), d.Remaining, e.cfg.capacity()-1)
	}
}

// checkZeroCost: n == 0 is allowed and reports the state without changing
// it, on a fresh key, a used one and a drained one.
func checkZeroCost(e *env) {
	key := e.key("zero")
	c := e.cfg.capacity()
	for i := 0; i < 3; i++ {
		e.mustFull(key)
	}
	e.mustAllow(key, 1)
	first, _ := e.allow(key, 0)
	if first.Remaining != c-1 {
		e.t.Errorf("%s: Remaining %d after one unit, want %d", e.where(key, 0), first.Remaining, c-1)
	}
	for i := 0; i < 3; i++ {
		if d, _ := e.allow(key, 0); d != first {
			e.t.Errorf("%s: a repeated report changed: %+v, first %+v", e.where(key, 0), d, first)
		}
	}
	e.takeAll(key, c-1)
	if d, _ := e.allow(key, 0); !d.Allowed || d.Remaining != 0 {
		e.t.Errorf("%s: report on a drained key: %+v, want allowed with Remaining 0", e.where(key, 0), d)
	}
}

// checkReset: Reset gives a key its whole quota back, and resetting a key
// that was never used is not an error.
func checkReset(e *env) {
	key := e.key("reset")
	c := e.cfg.capacity()
	e.takeAll(key, c)
	e.reset(key)
	e.mustFull(key)
	e.takeAll(key, c)
	e.advance(whole(e.cfg.rate.Period / 2))
	e.reset(key)
	e.takeAll(key, c)

	unused := e.key("never-used")
	e.reset(unused)
	e.mustFull(unused)
}

// checkIndependentKeys: keys that differ by a byte, case, a trailing space
// or a NUL never share a limit.
func checkIndependentKeys(e *env) {
	// One fresh base, so that the keys differ only in their last bytes.
	base := e.key("")
	labels := []string{"k", "K", "k ", "kk", "k\x00", "ключ", strings.Repeat("k", 200)}
	keys := make([]string, len(labels))
	for i, l := range labels {
		keys[i] = base + l
		e.labels[keys[i]] = l
	}
	c := e.cfg.capacity()
	for i, k := range keys {
		e.takeAll(k, c)
		for _, other := range keys[i+1:] {
			e.mustFull(other)
		}
	}
	e.reset(keys[0])
	e.mustFull(keys[0])
	for _, k := range keys[1:] {
		e.mustDeny(k, 1)
	}
}

// concurrentCallers is modest so that a remote store finishes quickly;
// with the attempts below it is still far more than the quota.
const concurrentCallers = 8

// checkConcurrent: many goroutines on one key at a frozen clock get exactly
// the quota, each unit once.
func checkConcurrent(e *env) {
	c := e.cfg.capacity()
	for _, n := range costs(c) {
		key := e.key("hot")
		want := c / n
		attempts := 2*want/concurrentCallers + 2
		type result struct {
			d   floodgate.Decision
			err error
		}
		results := make([][]result, concurrentCallers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < attempts; i++ {
					d, err := e.lim.AllowN(e.ctx, key, n)
					results[g] = append(results[g], result{d, err})
				}
			}()
		}
		close(start)
		wg.Wait()

		left := c - n*want
		allowed := 0
		seen := make(map[int]bool) // Remaining after each allowed request
		for _, rs := range results {
			for _, r := range rs {
				switch {
				case r.err != nil:
					e.t.Fatalf("n=%d: concurrent AllowN: %v", n, r.err)
				case r.d.Allowed:
					allowed++
					if seen[r.d.Remaining] {
						e.t.Errorf("n=%d: two allowed requests both left Remaining %d", n, r.d.Remaining)
					}
					seen[r.d.Remaining] = true
				case r.d.Remaining != left || r.d.RetryAfter <= 0:
					e.t.Errorf("n=%d: denied with %+v, want Remaining %d and a positive RetryAfter", n, r.d, left)
				}
			}
		}
		if allowed != want {
			e.t.Fatalf("n=%d: %d of %d concurrent requests allowed, want exactly %d",
				n, allowed, concurrentCallers*attempts, want)
		}
		for i := 1; i <= want; i++ {
			if !seen[c-n*i] {
				e.t.Errorf("n=%d: no allowed request left Remaining %d", n, c-n*i)
			}
		}
		// Tell the model what happened, then compare the state.
		if m := e.model(key); m != nil {
			for i := 0; i < want; i++ {
				if d, err := m.allowN(e.now(), n); err != nil || !d.Allowed {
					e.t.Fatalf("n=%d: the model refused request %d of the %d the limiter allowed: %+v, %v", n, i+1, want, d, err)
				}
			}
		}
		if d, _ := e.allow(key, 0); d.Remaining != left {
			e.t.Errorf("%s: Remaining %d after the concurrent requests, want %d", e.where(key, 0), d.Remaining, left)
		}
	}
}
