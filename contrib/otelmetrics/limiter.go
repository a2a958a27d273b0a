package otelmetrics

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/floodgate-go/floodgate/redisstore"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Watch registers l under name so that each scrape reports its state, and
// adds nothing to its decisions: the store's keys, bound and evictions for
// floodgate's in-memory limiters (floodgate.store.*), the fallback,
// deny-cache and error counts for redisstore's (floodgate.redis.*), and
// the lease counts of those that lease (floodgate.redis.lease.* and
// floodgate.redis.leases, see redisstore.WithLease), and the slots of an
// in-flight limit (floodgate.inflight.slot.*; its lost leases on Redis). A
// limiter that offers neither, or a name already registered with Limiter
// or Watch, is an error; the error of a duplicate wraps ErrDuplicateName.
// The name, like a policy name, must be printable ASCII.
//
// A Redis limiter's fallback is a limiter of its own: watch it under its
// own name to see its store.
func (m *Metrics) Watch(name string, l floodgate.Limiter) error {
	return m.limiters.Watch(name, l)
}

// Limiter registers l under name like Watch, and returns a Limiter that
// also records how long each AllowN of l takes in the histogram
// floodgate.decision.duration (unit s, buckets: WithBuckets), with the
// AllowN context (for exemplars). l may offer
// no Stats. The returned Limiter implements floodgate.Refunder and
// floodgate.Resetter exactly when l does (refunds and resets are not
// timed), so floodgate.All treats it as it would l, and a Rate method
// that returns l's rate, or the zero Rate if l reports none.
//
// Timing is meant for the limiters whose time matters, those on Redis:
// reading the clock twice can cost more than an in-memory decision
// itself, which Watch observes for free.
func (m *Metrics) Limiter(name string, l floodgate.Limiter) (floodgate.Limiter, error) {
	if err := m.limiters.Register(name, l); err != nil {
		return nil, err
	}
	// Built once: passing them allocates nothing.
	opts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name)))}
	return metricsbase.Timed(l, m.now, func(ctx context.Context, d time.Duration) {
		m.duration.Record(ctx, d.Seconds(), opts...)
	}), nil
}

// watched is a registered limiter, the statistics it offers and the
// attributes they are reported with.
type watched struct {
	metricsbase.Sources[redisstore.Stats, redisstore.LeaseStats] // Lease only if it leases

	limiter           metric.ObserveOption
	idle, live        metric.ObserveOption
	merged, forgotten metric.ObserveOption
	timeout, canceled metric.ObserveOption
	other             metric.ObserveOption
}

func newWatched(name string, s metricsbase.Sources[redisstore.Stats, redisstore.LeaseStats]) *watched {
	if !leasing(s.Lease) {
		s.Lease = nil
	}
	return &watched{
		Sources:   s,
		limiter:   metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name))),
		idle:      metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), EvictionKey.String("idle"))),
		live:      metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), EvictionKey.String("live"))),
		merged:    metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), DebtKey.String("merged"))),
		forgotten: metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), DebtKey.String("forgotten"))),
		timeout:   metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), ErrorTypeKey.String("timeout"))),
		canceled:  metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), ErrorTypeKey.String("canceled"))),
		other:     metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name), ErrorTypeKey.String("other"))),
	}
}
