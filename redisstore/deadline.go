package redisstore

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlineGrains is how finely the decision timeout is cut (see
// deadlines): a decision's deadline is rounded down to a fiftieth of
// WithTimeout, so that it gives up after between 98 % and 100 % of it.
const deadlineGrains = 50

// deadlines bounds the round trips of decisions whose caller's context
// can never end (context.Background, or one made by WithoutCancel) by
// the decision timeout (WithTimeout) without a timer of their own.
//
// context.WithTimeout starts a timer for every decision and stops it
// after the round trip; at one caller that cost about a twentieth of a
// decision's client CPU. Here a deadline is instead rounded down to a
// grain of the timeout, and every decision whose deadline falls on the
// same grain shares one tick: one channel, closed by one timer at that
// time, which is the Done of all their contexts. The deadline is never
// later than the timeout, and at most a grain earlier. A busy limiter
// starts one timer a grain rather than one a decision; an idle one, one
// a decision as before.
//
// A caller's context that can end (a request's) keeps
// context.WithTimeout: its Done must close when either the caller's
// context ends or the timeout passes, and only a timer of its own, or a
// goroutine, can join the two.
type deadlines struct {
	timeout time.Duration
	grain   time.Duration
	epoch   time.Time // origin of the grains, on the monotonic clock
	// last is the tick handed out last; a decision on another grain
	// starts a new one.
	last atomic.Pointer[deadlineTick]
}

// deadlineTick is one grain's deadline: done closes at its time.
type deadlineTick struct {
	n    int64 // grains since epoch
	at   time.Time
	done chan struct{}
	// bg is the context of every decision of this grain whose caller
	// passed context.Background(), which has no values: shared, it costs
	// no allocation.
	bg tickContext
}

func (d *deadlines) init(timeout time.Duration) {
	d.timeout = timeout
	d.grain = max(timeout/deadlineGrains, 1)
	d.epoch = time.Now()
}

// bound returns parent, which can never end, bounded by the timeout from
// now.
func (d *deadlines) bound(parent context.Context) context.Context {
	n := (int64(time.Since(d.epoch)) + int64(d.timeout)) / int64(d.grain)
	t := d.last.Load()
	if t == nil || t.n != n {
		t = d.start(t, n)
	}
	if parent == context.Background() {
		return &t.bg
	}
	return &tickContext{parent: parent, tick: t}
}

// Bound returns a context with the values of parent, which may end, that
// ends at the timeout from now and not before (groupcommit.Shared): a
// tickContext takes only its parent's values.
func (d *deadlines) Bound(parent context.Context) context.Context { return d.bound(parent) }

// start makes the tick of grain n, whose timer closes it at its time,
// and hands it out from now on unless another call replaced last (old)
// first. Two calls that start the tick of one grain at once each keep
// their own: both close at the same time.
func (d *deadlines) start(old *deadlineTick, n int64) *deadlineTick {
	t := &deadlineTick{n: n, at: d.epoch.Add(time.Duration(n) * d.grain), done: make(chan struct{})}
	t.bg = tickContext{parent: context.Background(), tick: t}
	time.AfterFunc(time.Until(t.at), func() { close(t.done) })
	d.last.CompareAndSwap(old, t)
	return t
}

// tickContext is a context with the values of parent that ends at its
// tick's time with context.DeadlineExceeded, whatever parent does (parent
// never ends, but for Bound's).
type tickContext struct {
	parent context.Context
	tick   *deadlineTick
}

// Deadline returns the tick's time.
func (c *tickContext) Deadline() (time.Time, bool) { return c.tick.at, true }

// Done returns the tick's channel, closed at its time.
func (c *tickContext) Done() <-chan struct{} { return c.tick.done }

// Err returns context.DeadlineExceeded once the tick has closed, and nil
// before.
func (c *tickContext) Err() error {
	select {
	case <-c.tick.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Value returns parent's value for key.
func (c *tickContext) Value(key any) any { return c.parent.Value(key) }
