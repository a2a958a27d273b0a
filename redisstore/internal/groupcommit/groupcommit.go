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
//     goroutine is started, so none can outlive the client.
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
	// lead's, in lead's goroutine, and fills in each call's reply. lead is
	// in batch. Send may run for two batches at once.
	Send func(lead *Call[V], batch []*Call[V])

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
		b.send(c, c.one[:])
		return nil
	}
	c.done = make(chan bool, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case lead := <-c.done:
		if lead {
			b.send(c, c.batch)
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
		// depends on it, and its deadline bounds the wait.
		<-c.done
		b.send(c, c.batch)
		return nil
	}
	// Already in a batch that another caller sends: its reply, when it
	// comes, is dropped.
	return c.Ctx.Err()
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

// CallerDeadline marks a context whose deadline is the caller's own,
// earlier than the decision timeout, and so one a client of the service
// may choose (a gRPC call's grpc-timeout, a per-request server timeout).
// A client library that closes a connection other commands share when one
// command's deadline passes — rueidis on a command it sends alone, which
// then fails every command queued on that connection with the deadline's
// error — must not be given it: one caller's short deadline would fail
// other callers' decisions, an error the error policy may turn into an
// admission. ForShared tells such an adapter which deadline to leave out.
type CallerDeadline struct{ context.Context }

// ForShared returns ctx for a client whose connections other callers
// share: ctx itself, or, if its deadline is a caller's own
// (CallerDeadline; lead is the context a batch runs under, or the call's
// own), ctx without a deadline. Such a context still ends when the
// caller's does, through Done: the client stops waiting for the reply and
// reads it later, without closing the connection.
func ForShared(lead, ctx context.Context) context.Context {
	if _, own := lead.(CallerDeadline); own {
		return noDeadline{ctx}
	}
	return ctx
}

// noDeadline is a context that reports no deadline but ends with its
// parent.
type noDeadline struct{ context.Context }

// Deadline reports none.
func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }
