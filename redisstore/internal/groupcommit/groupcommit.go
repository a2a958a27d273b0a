// Package groupcommit lets concurrent Redis script calls share pipelines,
// for both client adapters (goredisstore, rueidisstore).
//
// A client that sends one command per round trip makes the server spend
// most of its time in per-command reads and writes, and each caller holds
// a connection for a whole round trip. A Batcher lets concurrent calls
// share one pipeline instead, with at most two batches in flight:
//
//   - A call that finds fewer than two batches in flight is sent at once,
//     alone: a lone caller pays no added latency, and no timer is
//     involved.
//   - A call that finds two in flight queues. When either returns, the
//     caller that sent it takes the whole queue as the next batch, hands
//     it to one of the queued callers (that caller sends it, in its own
//     goroutine), then wakes its own batch's callers. A queued call thus
//     goes out as soon as either batch in flight returns: it waits for at
//     most one round trip before its own, and none is passed over. No
//     goroutine is started (but see Batcher.Aside), so none can outlive
//     the client.
//   - Two in flight rather than one keep the server busy: while the
//     client reads one batch's replies and writes the next, the server
//     runs the other batch instead of idling. Each batch is sent on its
//     own (a pipeline of go-redis's pool, a DoMulti of rueidis, or a
//     dedicated connection for WAIT), and each script runs atomically, so
//     two batches in flight at once may run in either order, as two
//     callers' lone scripts may.
//   - The queued caller chosen to send a batch is the one whose deadline
//     is latest, and the batch runs under that deadline: every other
//     caller's deadline is earlier, and each waits on its own context, so
//     each call keeps its own deadline and gets its own reply or error. A
//     caller whose context ends while queued withdraws its call, which then
//     never reaches the server.
//   - For a client that does work for all its callers under one command's
//     context (rueidis: see Bounded), a batch is sent under a context that
//     only the decision timeout ends (Shared), and a caller who is to send
//     it but whose own context can end sooner sends it in a goroutine of
//     its own and waits on its context (Batcher.Aside): the only goroutine
//     started, which ends when its batch returns.
package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one command waiting for, or carried by, a batch. V is the
// adapter's command and reply.
type Call[V any] struct {
	// Ctx is the caller's context.
	Ctx context.Context
	// V is the command, and its reply once the call's batch has run.
	V V

	// done receives true when the call is to send batch (it leads), and
	// false when its reply is in. Buffered, so the sender never blocks on
	// a caller that gave up.
	done chan bool
	// leads and batch are set under Batcher.mu when the call is picked to
	// send the next batch.
	leads bool
	batch []*Call[V]
	// one backs batch for a call that sends only itself, so a lone
	// caller's batch costs no allocation.
	one [1]*Call[V]
	// released is set by Release.
	released atomic.Bool
}

// Release, called by Send in its goroutine, says that the reply in c.V
// is final but for an error Send may still add (as goredisstore and
// rueidisstore do after WAIT): from then on a caller whose context ends
// before the batch returns may read the reply (see Released). Send must
// not change the reply's fields after Release.
func (c *Call[V]) Release() { c.released.Store(true) }

// Released reports whether Send released c's reply (Release) before Do
// returned c.Ctx's error: the caller may then read the reply, though not
// the error Send may still be adding.
func (c *Call[V]) Released() bool { return c.released.Load() }

// maxInFlight is the most batches a Batcher has in flight at once. One
// leaves the server idle while the client reads a batch's replies and
// writes the next; two keep it busy meanwhile (see the package doc). Three
// gained nothing consistent over two in issue 31's runs: more split the
// queue into smaller batches, and the server runs one script at a time.
const maxInFlight = 2

// Batcher groups concurrent calls into batches, at most two in flight.
type Batcher[V any] struct {
	// Send runs batch, whose calls' contexts have deadlines no later than
	// lead's, in lead's goroutine (or in one started for it: see Aside),
	// and fills in each call's reply. lead is in batch. Send may run for
	// two batches at once.
	Send func(lead *Call[V], batch []*Call[V])
	// Aside, when set, is for a Send that runs batch under a context no
	// caller's context ends (Shared): a caller to send batch whose context
	// is Bounded (can end sooner) sends it in a new goroutine and returns
	// when its context ends, as a queued caller does, rather than wait for
	// the batch. The goroutine ends with Send, and there are never more
	// of them than batches in flight.
	Aside bool

	mu       sync.Mutex
	inFlight int        // batches being sent, at most maxInFlight
	queue    []*Call[V] // calls waiting for the next batch; empty unless inFlight == maxInFlight
}

// Do sends c, alone or in a batch, and returns once its reply is in c.V,
// or with c.Ctx's error once c.Ctx has ended (c.V must not be read then).
func (b *Batcher[V]) Do(c *Call[V]) error {
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		// The queue is empty: a queued call would have gone out when a
		// batch returned, rather than let inFlight fall.
		b.inFlight++
		b.mu.Unlock()
		c.one[0] = c
		return b.lead(c, c.one[:])
	}
	c.done = make(chan bool, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case lead := <-c.done:
		if lead {
			return b.lead(c, c.batch)
		}
		return nil
	case <-c.Ctx.Done():
	}
	b.mu.Lock()
	for i, q := range b.queue {
		if q == c {
			// Still queued: withdraw, so the command is never sent.
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.mu.Unlock()
			return c.Ctx.Err()
		}
	}
	leads := c.leads
	b.mu.Unlock()
	if leads {
		// Picked to send a batch just as the context ended: the batch
		// depends on it, and its deadline bounds the wait, unless the
		// batch can go aside.
		<-c.done
		if b.aside(c) {
			go b.send(c, c.batch)
			return c.Ctx.Err()
		}
		b.send(c, c.batch)
		return nil
	}
	// Already in a batch that another caller sends: its reply, when it
	// comes, is dropped.
	return c.Ctx.Err()
}

// lead sends batch, which c leads, and returns once c's reply is in; or,
// if it goes aside, sends it in a new goroutine and returns with c.Ctx's
// error if c.Ctx ends first.
func (b *Batcher[V]) lead(c *Call[V], batch []*Call[V]) error {
	if !b.aside(c) {
		b.send(c, batch)
		return nil
	}
	if c.done == nil {
		c.done = make(chan bool, 1) // a lone call's
	}
	go func() {
		b.send(c, batch)
		c.done <- false
	}()
	select {
	case <-c.done:
		return nil
	case <-c.Ctx.Done():
		return c.Ctx.Err()
	}
}

// aside reports whether c's batch goes aside (see Batcher.Aside).
func (b *Batcher[V]) aside(c *Call[V]) bool {
	if !b.Aside {
		return false
	}
	_, sooner := c.Ctx.(Bounded)
	return sooner
}

// send runs batch, which self leads, then passes the queue on as the next
// batch, which takes batch's place in flight, and wakes batch's other
// callers.
func (b *Batcher[V]) send(self *Call[V], batch []*Call[V]) {
	b.Send(self, batch)

	b.mu.Lock()
	var next *Call[V]
	if len(b.queue) > 0 {
		queued := b.queue
		b.queue = nil
		live := queued[:0]
		for _, c := range queued {
			// A caller whose context has ended withdraws by itself when
			// it finds itself no longer queued; its command is not sent.
			if c.Ctx.Err() == nil {
				live = append(live, c)
			}
		}
		if len(live) > 0 {
			next = latestDeadline(live)
			next.leads, next.batch = true, live
		}
	}
	if next == nil {
		b.inFlight--
	}
	b.mu.Unlock()
	if next != nil {
		next.done <- true
	}
	for _, c := range batch {
		if c != self {
			c.done <- false
		}
	}
}

// latestDeadline returns the call whose context's deadline is latest (one
// without a deadline counts as latest).
func latestDeadline[V any](calls []*Call[V]) *Call[V] {
	best := calls[0]
	bestDL, bounded := best.Ctx.Deadline()
	for _, c := range calls[1:] {
		if !bounded {
			break
		}
		dl, ok := c.Ctx.Deadline()
		if !ok || dl.After(bestDL) {
			best, bestDL, bounded = c, dl, ok
		}
	}
	return best
}

// EarliestDeadline returns the earliest deadline of the calls' contexts,
// and false if none has one: the time by which a batch must have answered
// all of them.
func EarliestDeadline[V any](calls []*Call[V]) (time.Time, bool) {
	var earliest time.Time
	found := false
	for _, c := range calls {
		if dl, ok := c.Ctx.Deadline(); ok && (!found || dl.Before(earliest)) {
			earliest, found = dl, true
		}
	}
	return earliest, found
}

// Detached returns a context with the deadline and values of ctx that
// one caller's cancellation does not end: a batch carrying other callers'
// commands must not fail because the caller who sends it hung up. It ends
// at ctx's deadline, if ctx has one; cancel releases its timer.
func Detached(ctx context.Context) (context.Context, context.CancelFunc) {
	d := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(d, dl)
	}
	return d, func() {}
}

// DeadlineOnly is a context with the deadline and values of its parent
// but never cancelled, for a client that bounds its socket reads and
// writes by the deadline alone (go-redis with ContextTimeoutEnabled): it
// costs no timer.
type DeadlineOnly struct{ Parent context.Context }

// Deadline returns the parent's deadline.
func (d DeadlineOnly) Deadline() (time.Time, bool) { return d.Parent.Deadline() }

// Done returns nil: the context is never cancelled.
func (DeadlineOnly) Done() <-chan struct{} { return nil }

// Err returns nil: the context is never cancelled.
func (DeadlineOnly) Err() error { return nil }

// Value returns the parent's value for key.
func (d DeadlineOnly) Value(key any) any { return d.Parent.Value(key) }

// Bounded is the context of a decision whose caller's context can end
// before the decision timeout: by a deadline of the caller's own, earlier
// than the timeout, which a client of the service may choose (a gRPC
// call's grpc-timeout), or by a cancellation (an HTTP client hanging up).
// Context is the caller's, bounded by the timeout: what the caller waits
// on. Timeout bounds Shared's context by the decision timeout.
//
// A client library that shares its connections among callers does work
// for all of them under one command's context. rueidis dials a connection
// under the context of the command that finds it missing, and every
// command that meanwhile waits for that connection fails with the dial's
// error, which is the context's error when the context ends first; and it
// closes a connection when the deadline of a command it sent alone passes,
// failing the commands queued behind it. One caller giving up early must
// not fail other callers' decisions — an error the error policy may turn
// into an admission — so such a client is given Shared's context, which
// only the decision timeout ends, and a caller whose own context ends
// sooner leaves without waiting for it (Batcher.Aside).
type Bounded struct {
	context.Context
	Timeout Timeout
}

// Timeout bounds a context by a decision timeout.
type Timeout interface {
	// Bound returns a context with ctx's values that ends at the
	// decision timeout from now, and not before, whatever ctx does.
	Bound(ctx context.Context) context.Context
}

// Shared returns the context a command of ctx's is sent under on a
// connection other callers share, and whether ctx can end before it: for
// a Bounded ctx, one with its values that ends only at the decision
// timeout from now; any other ctx is its own.
func Shared(ctx context.Context) (context.Context, bool) {
	if b, ok := ctx.(Bounded); ok {
		return b.Timeout.Bound(b.Context), true
	}
	return ctx, false
}
