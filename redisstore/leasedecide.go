package redisstore

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
)

// leaseCall is one round trip of the lease mode: what it asks for and,
// once the script ran, what it got.
type leaseCall struct {
	n, want int
	// prefetch marks an early refresh: a lease taken ahead of need (n is
	// 0), queued behind the current one, whose before units go first.
	prefetch bool
	// giveBack marks a round trip that only gives an ended lease's tail
	// back (n and want are 0), sent by the key's timer.
	giveBack bool
	before   int
	// hold places a token bucket lease's slots at least this many µs
	// ahead, so that its units last until the local rate spends them.
	hold   int64
	anchor int64 // local ns, read before the round trip
	// The previous lease's unused tail, given back by this round trip:
	// retUnits in all, retLive of them still within their time.
	retUnits, retLive int
	retQ, retR        int64
	retAlg            any  // the rate the tail was leased under: given back only under it
	ran               bool // the script answered: the decision is Redis's
	failed            bool // the round trip failed
	got               int  // units taken in all, n of them for this decision
	ahead             int  // units of quota skipped to place the lease ahead
	returned          int  // units of the tail Redis took back
	next              leaseState
}

// allowLeased is AllowN in lease mode: from the key's lease if it holds n
// units, else after the key's round trip in flight, else by a round trip
// of its own that leases.
func (l *base) allowLeased(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if err := l.checkKey(key); err != nil {
		return floodgate.Decision{Limit: l.limit()}, err
	}
	if n == 0 {
		return l.reportLeased(ctx, key)
	}
	l.refreshLeased(ctx)
	if n > l.limit() {
		// Refused only under the record as read after this call began
		// (see checkCostNow); if Redis cannot be read, under the view.
		cctx, cancel := l.bound(ctx)
		if err := l.readRateSince(cctx, int64(time.Since(l.epoch))); err != nil {
			l.counts.countError(err)
		}
		if cancel != nil {
			cancel()
		}
	}
	if err := checkCost(n, l.limit()); err != nil {
		return floodgate.Decision{Limit: l.limit()}, err
	}
	for first := true; ; first = false {
		now, _, err := l.clock()
		if err != nil {
			return floodgate.Decision{Limit: l.limit()}, err
		}
		s := l.lease.step(key, n, now, first)
		switch s.kind {
		case leaseGranted:
			return s.d, nil
		case leaseFetch:
			return l.fetchLease(ctx, key, s.e, s.flight, s.call)
		case leaseRefresh:
			// The caller's units came from the lease; it takes the next
			// one before it returns, so that no other caller of the key
			// waits for a round trip. Its own answer stands whatever the
			// refresh meets.
			_, _ = l.fetchLease(ctx, key, s.e, s.flight, s.call)
			return s.d, nil
		}
		if d, done, err := l.awaitLease(ctx, key, n, s.flight); done {
			return d, err
		}
	}
}

// awaitLease waits for f, the round trip in flight for key, and answers
// the caller when trying the lease again would not help: its context
// ended, the round trip failed (each caller then decides on its own, with
// the fallback and error policy of a plain decision), or Redis denied the
// same cost.
func (l *base) awaitLease(ctx context.Context, key string, n int, f *leaseFlight) (floodgate.Decision, bool, error) {
	select {
	case <-f.done:
	case <-ctx.Done():
		d, err := l.decide(ctx, key, n, l.lease.algo.eval)
		return d, true, err
	}
	if f.failed {
		d, err := l.decide(ctx, key, n, l.lease.algo.eval)
		return d, true, err
	}
	now, _, err := l.clock()
	if err != nil {
		return floodgate.Decision{Limit: l.limit()}, true, err
	}
	if d, ok := f.reuse(n, now); ok {
		return d, true, nil
	}
	return floodgate.Decision{}, false, nil
}

// fetchLease sends the round trip planned in call for entry e, through
// decide (deny cache, timeout, fallback), records its outcome in the
// table and wakes f's waiters. Only this path allocates: call escapes into
// the script's closure.
func (l *base) fetchLease(ctx context.Context, key string, e *leaseEntry, f *leaseFlight, call leaseCall) (floodgate.Decision, error) {
	t, c := l.lease, &call
	eval := func(ctx context.Context, key string, n int, now string) (floodgate.Decision, error) {
		if !c.prefetch {
			t.retire(key, e, c)
		}
		var d floodgate.Decision
		var err error
		if c.giveBack && c.retUnits == 0 {
			return d, nil // taken back meanwhile: nothing to send
		}
		if c.want == c.n && c.retUnits == 0 {
			// Nothing to lease, nothing to give back: the plain script.
			d, err = t.algo.eval(ctx, key, n, now)
			c.ran = err == nil
			if d.Allowed {
				c.got = n
			}
		} else {
			d, err = t.algo.leaseEval(ctx, key, c, now)
		}
		c.failed = err != nil
		return d, err
	}
	d, err := l.decide(ctx, key, c.n, eval)
	end, _, _ := l.clock()
	t.finish(key, e, f, c, d, end)
	return d, err
}

// endLease gives back to Redis, at local time now, the units key's
// leases left unused when they ended, if no round trip has: the timer of
// the key's entry e calls it when a lease ends (the sliding counter, on
// the server's clock).
func (l *base) endLease(key string, e *leaseEntry) {
	now, _, err := l.clock()
	if err != nil {
		return
	}
	if f, c, ok := l.lease.ending(key, e, now); ok {
		_, _ = l.fetchLease(context.Background(), key, e, f, c)
	}
}

// reportLeased answers a report (n == 0): from the key's lease while it
// holds units, as its decisions are; from Redis otherwise.
func (l *base) reportLeased(ctx context.Context, key string) (floodgate.Decision, error) {
	now, _, err := l.clock()
	if err != nil {
		return floodgate.Decision{Limit: l.limit()}, err
	}
	if d, ok := l.lease.report(key, now); ok {
		return d, nil
	}
	return l.decide(ctx, key, 0, l.lease.algo.eval)
}

// refundLease is RefundN in lease mode, for a valid n > 0: the units go
// back to the key's lease when it allowed that many and they are still
// within their time, else to Redis, never below what leases may still
// grant.
func (l *base) refundLease(ctx context.Context, key string, n int) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	now, _, err := l.clock()
	if err != nil {
		return err
	}
	if l.lease.giveBack(key, n, now) {
		if l.deny != nil {
			l.deny.forget(key)
		}
		return nil
	}
	return l.refund(ctx, key, func(ctx context.Context, arg string) error {
		return l.lease.algo.refundLeased(ctx, key, n, arg)
	})
}

// resetLease is Reset in lease mode: this instance drops the key's lease
// (its unused units are stranded) and Redis forgets keys, lease marks
// included. Other instances' leases keep their units: see the package
// documentation for the bound.
func (l *base) resetLease(ctx context.Context, key string, keys []string) error {
	if l.checkKey(key) == nil {
		l.lease.forget(key)
	}
	return l.reset(ctx, key, keys)
}

// leaseStats reads the lease counts; zero without WithLease.
func (l *base) leaseStats() LeaseStats {
	if l.lease == nil {
		return LeaseStats{}
	}
	return l.lease.stats()
}

// refreshLeased reads the rate record once a refresh interval (see
// WithRateRefresh), for the decisions a lease answers without a round
// trip: a change of rate drops the leases taken under the old one. A
// failed read is not retried before the next interval: the lease
// decisions do not wait on a Redis that does not answer.
func (l *base) refreshLeased(ctx context.Context) {
	now := int64(time.Since(l.epoch))
	if now-l.rates.checked.Load() < int64(l.rates.refresh) {
		return
	}
	cctx, cancel := l.bound(ctx)
	if err := l.readRate(cctx, false); err != nil {
		l.counts.countError(err)
		l.rates.checked.Store(now)
	}
	if cancel != nil {
		cancel()
	}
}
