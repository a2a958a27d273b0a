package prommetrics

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/floodgate-go/floodgate/redisstore"
)

// Watch registers l under name so that each scrape reports its state, and
// adds nothing to its decisions: the store's keys, bound and evictions for
// floodgate's in-memory limiters (floodgate_store_*), the fallback,
// deny-cache and error counts for redisstore's (floodgate_redis_*), and
// the lease counts of those that lease (floodgate_redis_lease*, see
// redisstore.WithLease), and the slots of an in-flight limit
// (floodgate_inflight_*; its lost leases on Redis). A
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
// floodgate_decision_duration_seconds (buckets: WithBuckets). l may offer
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
	obs := m.duration.WithLabelValues(name)
	return metricsbase.Timed(l, m.now, func(_ context.Context, d time.Duration) {
		obs.Observe(d.Seconds())
	}), nil
}

// watched is a registered limiter and the statistics it offers; Lease
// only if it leases.
type watched struct {
	name string
	metricsbase.Sources[redisstore.Stats, redisstore.LeaseStats]
}

func newWatched(name string, s metricsbase.Sources[redisstore.Stats, redisstore.LeaseStats]) *watched {
	if !leasing(s.Lease) {
		s.Lease = nil
	}
	return &watched{name: name, Sources: s}
}
