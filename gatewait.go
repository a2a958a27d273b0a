package floodgate

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// WaitLimits bounds waiting for a turn (WithWait). All three are
// required.
type WaitLimits struct {
	// MaxWait is the longest a call is held for its turn: a call whose
	// units come later than that is refused at once. At most MaxWaitLimit.
	MaxWait time.Duration
	// PerKey is how many calls of one key may wait at once; the next one
	// is refused at once.
	PerKey int
	// Total is how many calls may wait at once over all keys; the next
	// one is refused at once. It bounds the goroutines and the memory
	// waiting can hold: each waiting call keeps its request, its
	// goroutine and a timer.
	Total int
}

// MaxWaitLimit is the largest WaitLimits.MaxWait: waiting is for turns
// that come soon, and a request held for an hour holds its connection,
// its goroutine and its client as long.
const MaxWaitLimit = time.Hour

// WithWait holds a call the limit would deny until its turn, when that
// comes within w.MaxWait, instead of refusing it — nginx's limit_req with
// burst and delay. The call's units are booked at once (Reserver), so
// waiting calls are served in the order they came; the call is held until
// they are its own, then goes on as allowed. A call is refused at once,
// as without this option, when its turn is further than w.MaxWait, when
// w.PerKey calls of its key or w.Total calls in all are waiting already,
// or when its context's deadline comes before its turn (a gRPC deadline,
// say): its booking is given back. A client that hangs up while waiting
// gives its booking back too, and never reaches the handler.
//
// On a token bucket of 10 per second with MaxWait 1 s, a burst of 20 sees
// 10 calls pass at once and 10 more spaced 100 ms apart, none denied; a
// 21st within that second would have to wait more than a second, and is
// denied. Every policy's limiter must implement Reserver (TokenBucket
// does, in memory and on Redis; All of them too); NewMiddleware refuses
// the option otherwise.
func WithWait(w WaitLimits) MiddlewareOption {
	return func(c *middlewareConfig) error {
		switch {
		case w.MaxWait <= 0 || w.MaxWait > MaxWaitLimit:
			return fmt.Errorf("%w: WithWait: MaxWait %s must be in (0, %s]", ErrInvalidOption, w.MaxWait, MaxWaitLimit)
		case w.PerKey <= 0:
			return fmt.Errorf("%w: WithWait: PerKey %d must be positive: how many calls of one key may wait at once", ErrInvalidOption, w.PerKey)
		case w.Total <= 0:
			return fmt.Errorf("%w: WithWait: Total %d must be positive: how many calls may wait at once in all", ErrInvalidOption, w.Total)
		}
		if c.wait == nil {
			c.wait = &waiting{}
		}
		c.wait.limits = w
		return c.once("WithWait")
	}
}

// WithWaitTimer sets the timer waiting calls sleep on (default
// time.NewTimer): after returns a channel that receives when d has
// passed, and a function that stops it. It is meant for tests, together
// with the limiter's WithClock (floodgatetest.Clock's After fits), and
// requires WithWait.
func WithWaitTimer(after func(d time.Duration) (<-chan time.Time, func() bool)) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if after == nil {
			return fmt.Errorf("%w: nil wait timer", ErrInvalidOption)
		}
		if c.wait == nil {
			c.wait = &waiting{}
		}
		c.wait.after = after
		return c.once("WithWaitTimer")
	}
}

// systemTimer is the default wait timer.
func systemTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// waiting counts the calls a gate holds, in all and per key.
type waiting struct {
	limits WaitLimits
	after  func(time.Duration) (<-chan time.Time, func() bool)
	total  atomic.Int64
	seed   maphash.Seed
	shards [waitShards]waitShard
}

// waitShards is how many locks the per-key counts are spread over.
const waitShards = 16

type waitShard struct {
	mu sync.Mutex
	n  map[uint64]int32 // waiting calls per key hash; no zero entries
}

// clone returns the counters a gate starts with, for limits given as an
// option (which two gates could share).
func (w *waiting) clone() *waiting {
	c := &waiting{limits: w.limits, after: w.after, seed: maphash.MakeSeed()}
	if c.after == nil {
		c.after = systemTimer
	}
	for i := range c.shards {
		c.shards[i].n = make(map[uint64]int32)
	}
	return c
}

// enter counts a call of key in, if the bounds allow one more; it returns
// the key's hash for leave.
func (w *waiting) enter(key string) (uint64, bool) {
	for { // a compare-and-swap, so that the count never reads above Total
		n := w.total.Load()
		if n >= int64(w.limits.Total) {
			return 0, false
		}
		if w.total.CompareAndSwap(n, n+1) {
			break
		}
	}
	h := maphash.String(w.seed, key)
	sh := &w.shards[h%waitShards]
	sh.mu.Lock()
	ok := int(sh.n[h]) < w.limits.PerKey
	if ok {
		sh.n[h]++
	}
	sh.mu.Unlock()
	if !ok {
		w.total.Add(-1)
	}
	return h, ok
}

// leave counts a call that entered out.
func (w *waiting) leave(h uint64) {
	sh := &w.shards[h%waitShards]
	sh.mu.Lock()
	if sh.n[h] <= 1 {
		delete(sh.n, h)
	} else {
		sh.n[h]--
	}
	sh.mu.Unlock()
	w.total.Add(-1)
}

// Waiting returns how many calls the gate holds for their turn now
// (WithWait): for metrics, and to see the bound hold.
func (g *Gate) Waiting() int {
	if g.cfg.wait == nil {
		return 0
	}
	return int(g.cfg.wait.total.Load())
}

// reserve decides a call under WithWait: it books the call's units, and
// if they come later, holds the call until they are its own.
func (g *Gate) reserve(ctx context.Context, out *Outcome) error {
	c := &out.Call
	r := c.policy.Limiter.(Reserver) // checked by newGate
	res, err := r.ReserveN(ctx, c.Key, c.Cost, g.cfg.wait.limits.MaxWait)
	out.Decision = res.Decision
	if err != nil || !res.Allowed || res.Wait <= 0 {
		return err
	}
	return g.hold(ctx, out, r, res.Wait)
}

// hold waits until a booked call's turn. A call that may not wait (the
// bounds are reached, or its deadline comes first) is denied instead,
// and one whose client hangs up fails with the context's error; both
// give their booking back.
func (g *Gate) hold(ctx context.Context, out *Outcome, r Reserver, wait time.Duration) error {
	w, c := g.cfg.wait, &out.Call
	deadline, hasDeadline := ctx.Deadline()
	h, entered := uint64(0), false
	if !hasDeadline || !g.cfg.now().Add(wait).After(deadline) {
		h, entered = w.enter(c.Key)
	}
	if !entered {
		g.unbook(ctx, out, r)
		d := &out.Decision
		d.Allowed, d.RetryAfter = false, wait
		return nil
	}
	defer w.leave(h)
	fired, stop := w.after(wait)
	select {
	case <-fired:
		out.Waited = wait
		return nil
	case <-ctx.Done():
		stop()
		g.unbook(ctx, out, r)
		return fmt.Errorf("floodgate: the client went away while waiting %s for its turn: %w", wait, ctx.Err())
	}
}

// unbook gives a booking back; it is owed even if the client has gone.
func (g *Gate) unbook(ctx context.Context, out *Outcome, r Reserver) {
	if err := r.RefundN(context.WithoutCancel(ctx), out.Call.Key, out.Call.Cost); err != nil {
		g.logError(ctx, out, err)
	}
}
