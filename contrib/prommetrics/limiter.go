package prommetrics

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/prometheus/client_golang/prometheus"
)

// storeStats is implemented by floodgate's in-memory limiters.
type storeStats interface{ Stats() floodgate.Stats }

// redisStats is implemented by redisstore's limiters.
type redisStats interface{ Stats() redisstore.Stats }

// rater is implemented by limiters that report their rate; the middleware
// advertises it in RateLimit-Policy, so the timed wrapper passes it on.
type rater interface{ Rate() floodgate.Rate }

// Watch registers l under name so that each scrape reports its state, and
// adds nothing to its decisions: the store's keys, bound and evictions for
// floodgate's in-memory limiters (floodgate_store_*), the fallback,
// deny-cache and error counts for redisstore's (floodgate_redis_*). A
// limiter that offers neither, or a name already registered with Limiter
// or Watch, is an error; the error of a duplicate wraps ErrDuplicateName.
// The name, like a policy name, must be printable ASCII.
//
// A Redis limiter's fallback is a limiter of its own: watch it under its
// own name to see its store.
func (m *Metrics) Watch(name string, l floodgate.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: nil limiter %q", floodgate.ErrInvalidOption, name)
	}
	if _, ok := l.(storeStats); !ok {
		if _, ok := l.(redisStats); !ok {
			return fmt.Errorf("%w: limiter %q (%T) reports no Stats to watch", floodgate.ErrInvalidOption, name, l)
		}
	}
	return m.register(name, l)
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
	if l == nil {
		return nil, fmt.Errorf("%w: nil limiter %q", floodgate.ErrInvalidOption, name)
	}
	if err := m.register(name, l); err != nil {
		return nil, err
	}
	t := &timed{l: l, obs: m.duration.WithLabelValues(name), now: m.now}
	_, refunds := l.(floodgate.Refunder)
	_, resets := l.(floodgate.Resetter)
	switch {
	case refunds && resets:
		return timedRefundResetter{t}, nil
	case refunds:
		return timedRefunder{t}, nil
	case resets:
		return timedResetter{t}, nil
	}
	return t, nil
}

// register records name, refusing a duplicate.
func (m *Metrics) register(name string, l floodgate.Limiter) error {
	if name == "" || !printable(name) {
		return fmt.Errorf("%w: limiter name %q must be non-empty printable ASCII", floodgate.ErrInvalidOption, name)
	}
	w := &watched{name: name}
	if s, ok := l.(storeStats); ok {
		w.store = s.Stats
	}
	if s, ok := l.(redisStats); ok {
		w.redis = s.Stats
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names[name] {
		return fmt.Errorf("%w: limiter %q", ErrDuplicateName, name)
	}
	m.names[name] = true
	m.limiters = append(m.limiters, w)
	return nil
}

// timed records the duration of each decision of l.
type timed struct {
	l   floodgate.Limiter
	obs prometheus.Observer
	now func() time.Time
}

// AllowN implements floodgate.Limiter.
func (t *timed) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	start := t.now()
	d, err := t.l.AllowN(ctx, key, n)
	t.obs.Observe(t.now().Sub(start).Seconds())
	return d, err
}

// Rate returns the wrapped limiter's rate, or the zero Rate.
func (t *timed) Rate() floodgate.Rate {
	if r, ok := t.l.(rater); ok {
		return r.Rate()
	}
	return floodgate.Rate{}
}

type timedRefunder struct{ *timed }

// RefundN implements floodgate.Refunder.
func (t timedRefunder) RefundN(ctx context.Context, key string, n int) error {
	return t.l.(floodgate.Refunder).RefundN(ctx, key, n)
}

type timedResetter struct{ *timed }

// Reset implements floodgate.Resetter.
func (t timedResetter) Reset(ctx context.Context, key string) error {
	return t.l.(floodgate.Resetter).Reset(ctx, key)
}

type timedRefundResetter struct{ *timed }

// RefundN implements floodgate.Refunder.
func (t timedRefundResetter) RefundN(ctx context.Context, key string, n int) error {
	return t.l.(floodgate.Refunder).RefundN(ctx, key, n)
}

// Reset implements floodgate.Resetter.
func (t timedRefundResetter) Reset(ctx context.Context, key string) error {
	return t.l.(floodgate.Resetter).Reset(ctx, key)
}

var (
	_ floodgate.Limiter  = (*timed)(nil)
	_ floodgate.Refunder = timedRefunder{}
	_ floodgate.Resetter = timedResetter{}
	_ floodgate.Refunder = timedRefundResetter{}
	_ floodgate.Resetter = timedRefundResetter{}
)
