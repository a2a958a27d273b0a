package goredisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Group commit. go-redis sends one command per connection round trip, so
// under many concurrent decisions the server spends most of its time in
// per-command reads and writes, and each caller holds a pooled connection
// for a whole round trip. The batcher lets concurrent script calls share
// one pipeline instead:
//
//   - A call that finds no pipeline in flight sends its command at once,
//     alone: a lone caller pays no added latency, and no timer is involved.
//   - A call that finds one in flight queues. When the pipeline returns,
//     the caller that sent it takes the whole queue as the next batch,
//     hands it to one of the queued callers (that caller sends it, in its
//     own goroutine), then delivers its own batch's results. No goroutine
//     is started, so none can outlive the client.
//   - The queued caller chosen to send a batch is the one whose deadline is
//     latest, and the pipeline runs under that deadline: every other
//     caller's deadline is earlier, and each of them waits on its own
//     context, so each decision keeps its own deadline and gets its own
//     command's reply or error. A caller whose context ends while queued
//     withdraws its command, which then never reaches the server.
//   - Script commands are marked not retryable (noRetry), and go-redis
//     never retries a pipeline that holds one.
//
// A cluster client splits each pipeline by node and sends the parts in
// parallel, so batches are per node there.
type batcher struct {
	client redis.UniversalClient
	// wait, when set, is appended to every pipeline: WAIT for replicas
	// (WithWaitReplicas).
	wait *waitReplicas

	mu    sync.Mutex
	busy  bool    // a batch is in flight
	queue []*call // calls waiting for the next batch; empty unless busy
}

// call is one script command waiting for, or carried by, a batch.
type call struct {
	ctx context.Context
	cmd redis.Cmder
	// err is the batch's error that is not the command's own: replicas
	// that did not acknowledge in time (WithWaitReplicas).
	err error
	// done receives true when the call is to send batch (it leads), and
	// false when its reply is in. Buffered, so the sender never blocks
	// on a caller that gave up.
	done chan bool
	// leads and batch are set under batcher.mu when the call is picked to
	// send the next batch.
	leads bool
	batch []*call
	// one backs batch for a call that sends only itself, so a lone
	// caller's batch costs no allocation.
	one [1]*call
}

// do sends c.cmd, alone or in a batch, and returns once its reply is in or
// c.ctx ends.
func (b *batcher) do(c *call) error {
	b.mu.Lock()
	if !b.busy {
		b.busy = true
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
	case <-c.ctx.Done():
	}
	b.mu.Lock()
	for i, q := range b.queue {
		if q == c {
			// Still queued: withdraw, so the command is never sent.
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.mu.Unlock()
			return c.ctx.Err()
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
	return c.ctx.Err()
}

// send runs batch, which self leads, then passes the queue on as the next
// batch and wakes batch's other callers.
func (b *batcher) send(self *call, batch []*call) {
	if len(batch) == 1 && b.wait == nil {
		_ = b.client.Process(self.ctx, self.cmd)
	} else {
		p := b.client.Pipeline()
		for _, c := range batch {
			_ = p.Process(c.ctx, c.cmd)
		}
		var wait *redis.IntCmd
		if b.wait != nil {
			wait = b.wait.cmd(self.ctx)
			_ = p.Process(self.ctx, wait)
		}
		// The pipeline must not fail because self's caller hung up: the
		// other callers' commands ride on it. self's deadline is the
		// latest in the batch, so it bounds the socket wait for all.
		_, _ = p.Exec(detached{self.ctx})
		if wait != nil {
			if err := b.wait.check(wait); err != nil {
				for _, c := range batch {
					if c.cmd.Err() == nil {
						c.err = err
					}
				}
			}
		}
	}

	b.mu.Lock()
	var next *call
	if len(b.queue) == 0 {
		b.busy = false
	} else {
		queued := b.queue
		b.queue = nil
		live := queued[:0]
		for _, c := range queued {
			// A caller whose context has ended withdraws by itself when
			// it finds itself no longer queued; its command is not sent.
			if c.ctx.Err() == nil {
				live = append(live, c)
			}
		}
		if len(live) == 0 {
			b.busy = false
		} else {
			next = latestDeadline(live)
			next.leads, next.batch = true, live
		}
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
func latestDeadline(calls []*call) *call {
	best := calls[0]
	bestDL, bounded := best.ctx.Deadline()
	for _, c := range calls[1:] {
		if !bounded {
			break
		}
		dl, ok := c.ctx.Deadline()
		if !ok || dl.After(bestDL) {
			best, bestDL, bounded = c, dl, ok
		}
	}
	return best
}

// detached is a context with the deadline and values of its parent but
// never cancelled: go-redis bounds a pipeline's socket reads and writes by
// the deadline (with ContextTimeoutEnabled), while one caller's
// cancellation must not abort a pipeline that carries other callers'
// commands.
type detached struct{ parent context.Context }

func (d detached) Deadline() (time.Time, bool) { return d.parent.Deadline() }
func (detached) Done() <-chan struct{}         { return nil }
func (detached) Err() error                    { return nil }
func (d detached) Value(key any) any           { return d.parent.Value(key) }
