package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
)

// Stats describes how a Redis limiter has been deciding besides asking
// Redis: whether its fallback answers now, how often the fallback and the
// deny cache answered, and the round trips that failed, by kind. The
// metrics adapters (contrib/prommetrics, contrib/otelmetrics) read it at
// scrape time.
//
// Every count starts at zero when the limiter is built and only grows.
// Reading Stats costs a few atomic loads and takes no lock, and counting
// costs one atomic add on the paths it counts, so it is always on. The
// error counts cover the round trips of decisions, refunds and resets,
// including those a fallback then answered for.
type Stats struct {
	// FallbackActive reports that decisions go to the fallback limiter
	// (WithFallback) now: a round trip failed and no probe of Redis has
	// succeeded since. Always false without a fallback.
	FallbackActive bool
	// FallbackDecisions counts the decisions the fallback limiter made,
	// whether Redis had just failed or was not tried while the fallback
	// was active.
	FallbackDecisions uint64
	// DenyCacheHits counts the denials answered from the deny cache
	// (WithDenyCache), each a round trip saved.
	DenyCacheHits uint64
	// TimeoutErrors counts round trips that ran out of time: the limiter's
	// timeout (WithTimeout) or the caller's deadline passed, or the
	// client reported a network timeout. A growing count means Redis, or
	// the network to it, is slow or unreachable.
	TimeoutErrors uint64
	// CanceledErrors counts decisions abandoned because the caller's
	// context was cancelled, typically by an HTTP client that hung up,
	// whether before the round trip (nothing is sent) or during it. It
	// says more about the callers than about Redis; such a decision
	// returns an error wrapping context.Canceled, not ErrRedis.
	CanceledErrors uint64
	// OtherErrors counts the round trips that failed otherwise: Redis
	// refused the connection or answered with an error, a script's reply
	// made no sense, or too few replicas acknowledged an allowed decision
	// (ErrNotReplicated).
	OtherErrors uint64
	// ChurnDenials counts the decisions refused because the rate (SetRate,
	// or a PlanLimiter's plan) kept changing at every try of the decision:
	// Redis answered, but each answer was under a rate the next try had
	// already replaced. They are denials marked Decision.Overloaded, never
	// errors, so no error policy lets them through. A growing count means
	// instances disagree on the rate or a key's plan for long: rates
	// changed faster than the refresh interval, or plans that flip.
	ChurnDenials uint64
}

// counters are the atomic counts behind Stats, one set per limiter.
type counters struct {
	fallbackDecisions atomic.Uint64
	denyCacheHits     atomic.Uint64
	timeoutErrors     atomic.Uint64
	canceledErrors    atomic.Uint64
	otherErrors       atomic.Uint64
	churnDenials      atomic.Uint64
}

// countError counts a failed round trip under its kind. Cancellation is
// tested first: a client that hangs up during a round trip is not a slow
// Redis.
func (c *counters) countError(err error) {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		c.canceledErrors.Add(1)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		c.timeoutErrors.Add(1)
	default:
		c.otherErrors.Add(1)
	}
}

// stats reads the counts of l.
func (l *base) stats() Stats {
	return Stats{
		FallbackActive:    l.fallback != nil && l.breaker.down.Load() != 0,
		FallbackDecisions: l.counts.fallbackDecisions.Load(),
		DenyCacheHits:     l.counts.denyCacheHits.Load(),
		TimeoutErrors:     l.counts.timeoutErrors.Load(),
		CanceledErrors:    l.counts.canceledErrors.Load(),
		OtherErrors:       l.counts.otherErrors.Load(),
		ChurnDenials:      l.counts.churnDenials.Load(),
	}
}

// Stats reports the bucket's fallback, deny-cache and error counts.
func (b *TokenBucket) Stats() Stats { return b.stats() }

// Stats reports the log's fallback, deny-cache and error counts.
func (l *SlidingLog) Stats() Stats { return l.stats() }

// Stats reports the counter's fallback, deny-cache and error counts.
func (sc *SlidingCounter) Stats() Stats { return sc.stats() }
