package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/floodgate-go/floodgate/redisstore"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the meter the instruments
// come from.
const ScopeName = "github.com/floodgate-go/floodgate/contrib/otelmetrics"

// The attribute keys.
const (
	// PolicyKey names the policy of a decision.
	PolicyKey = attribute.Key("floodgate.policy")
	// OutcomeKey is a decision's outcome: one of the Outcome… values.
	OutcomeKey = attribute.Key("floodgate.outcome")
	// LimiterKey names a limiter registered with Limiter or Watch.
	LimiterKey = attribute.Key("floodgate.limiter")
	// EvictionKey is the kind of an eviction: idle or live.
	EvictionKey = attribute.Key("floodgate.eviction.kind")
	// DebtKey is how a debt lost its own entry in a full debt memory:
	// merged or forgotten.
	DebtKey = attribute.Key("floodgate.debt.kind")
	// ErrorTypeKey is the kind of a failed Redis round trip: timeout,
	// canceled or other. It is OpenTelemetry's error.type.
	ErrorTypeKey = attribute.Key("error.type")
)

// The values of OutcomeKey.
const (
	// OutcomeAllowed: the limiter allowed the request.
	OutcomeAllowed = "allowed"
	// OutcomeDenied: the limiter denied the request and it was refused
	// (a cost that can never fit, floodgate.ErrCostExceedsLimit, included).
	OutcomeDenied = "denied"
	// OutcomeDryRunDenied: the limiter denied the request, but the
	// middleware ran in dry-run (floodgate.WithDryRun) and let it through.
	OutcomeDryRunDenied = "dry_run_denied"
	// OutcomeError: no decision could be made (the key function, the cost
	// function or the limiter failed); the error policy applied.
	OutcomeError = "error"
	// OutcomeSkipped: a predicate wrapped by Skip exempted the request.
	OutcomeSkipped = "skipped"
)

// ErrDuplicateName is wrapped by the error of Limiter and Watch when the
// name is already registered with the same Metrics: two limiters under
// one name would add up into one stream and hide each other. It wraps
// floodgate.ErrInvalidOption.
var ErrDuplicateName = fmt.Errorf("%w: name already registered", floodgate.ErrInvalidOption)

// OtherPolicy is the policy attribute under which decisions are counted
// when their policy name cannot be an attribute value of its own: a name
// that is not printable ASCII, or a new name once MaxPolicies names have
// been seen. It keeps a program that passes a client key as the policy
// name to Observe from growing a stream per client. Its value is "(other)".
const OtherPolicy = metricsbase.OtherPolicy

// MaxPolicies bounds the distinct policy names counted.
const MaxPolicies = metricsbase.MaxPolicies

// DefaultBuckets are the advised bucket boundaries, in seconds, of the
// decision latency histogram: from 100 µs, a Redis round trip on a local
// network, to 1 s, ten times redisstore's default timeout. The SDK's views
// may override them.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// outcomeValues are the values of OutcomeKey, indexed by outcome.
var outcomeValues = [metricsbase.NumOutcomes]string{OutcomeAllowed, OutcomeDenied, OutcomeDryRunDenied, OutcomeError, OutcomeSkipped}

// Option configures New.
type Option func(*config) error

type config struct {
	policies []string
	provider metric.MeterProvider
	buckets  []float64
}

// WithMeterProvider sets where the instruments come from (default the
// global provider, otel.GetMeterProvider(), read when New runs; a global
// provider set later is still used, as the global one delegates).
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) error {
		if p == nil {
			return fmt.Errorf("%w: nil meter provider", floodgate.ErrInvalidOption)
		}
		c.provider = p
		return nil
	}
}

// WithPolicies declares the policies whose decisions will be counted:
// the names given to floodgate.WithPolicyName (floodgate.DefaultPolicyName
// when none is), to each floodgate.Policy of a PolicySelector or Routes,
// and to Observe. Each of their outcomes (allowed, denied, dry_run_denied,
// error) is reported at 0 from the first collection on, before its first
// decision, so that a rate computed by the backend counts the first
// burst: a rate (Prometheus's rate() and increase() of the exported
// counter, say) is measured from a stream's first point, and a stream
// that only appears with its first decision hides it, which is how a new
// attack's first wave would miss an alert. A policy not declared is still
// counted, from its first decision on. Names must be non-empty printable
// ASCII, as floodgate requires, and at most MaxPolicies in all; New
// refuses others with an error wrapping floodgate.ErrInvalidOption.
// Given more than once, the lists add up.
func WithPolicies(names ...string) Option {
	return func(c *config) error {
		c.policies = append(c.policies, names...)
		return nil
	}
}

// WithBuckets sets the advised bucket boundaries, in seconds, of the
// decision latency histogram (default DefaultBuckets). They must be
// finite and strictly increasing.
func WithBuckets(bounds ...float64) Option {
	return func(c *config) error {
		b, err := metricsbase.Buckets(bounds)
		if err != nil {
			return err
		}
		c.buckets = b
		return nil
	}
}

// Metrics counts floodgate's decisions and reports its limiters' state
// through OpenTelemetry instruments. Feed it:
//
//   - decisions, from the middleware with WithDecisionHook(m.Hook()) and
//     from business code with Observe, counted by policy and outcome in
//     floodgate.decisions;
//   - exemptions, by wrapping WithSkip's predicate with Skip;
//   - limiters, with Limiter (latency, store and Redis state) or Watch
//     (store and Redis state only), under a name of your choosing;
//   - the calls a middleware or interceptor holds for their turn, with
//     WatchGate.
//
// Counting a decision costs one atomic add, after a lock-free map lookup
// that each hook skips while its policy stays the same: the counts are kept here and reported by an observable counter's
// callback. Store sizes and Redis state are read from the limiters' Stats
// in the same callback, when the SDK collects, never on the request path.
// A Metrics is safe for concurrent use.
type Metrics struct {
	duration metric.Float64Histogram

	// The observable instruments, reported by one callback.
	decisions, fallbackDecisions, denyCacheHits, redisErrors, evictions metric.Int64ObservableCounter
	debtsLost, capped                                                   metric.Int64ObservableCounter
	keys, maxKeys, debtCapacity                                         metric.Int64ObservableUpDownCounter
	fallbackActive                                                      metric.Int64ObservableGauge
	lease                                                               leaseInstruments
	kinds                                                               kindsInstruments

	policies *metricsbase.Policies[policyCounters]
	limiters *metricsbase.Registry[redisstore.Stats, redisstore.LeaseStats, *watched]
	gates    *metricsbase.Gates[metric.ObserveOption]

	now func() time.Time // the latency clock; tests replace it
}

// policyCounters are one policy's decision counts and the attributes they
// are reported with.
type policyCounters struct {
	n     [metricsbase.NumOutcomes]atomic.Uint64
	attrs [metricsbase.NumOutcomes]metric.ObserveOption
	skips atomic.Bool // Skip was called for the policy: report skipped
	// capped counts the settlements whose charge the key's debt limits
	// capped (DecisionEvent.DebtCapped), reported with policy.
	capped atomic.Uint64
	policy metric.ObserveOption
}

// New returns a Metrics whose instruments come from the meter ScopeName of
// the provider (WithMeterProvider, default the global one). Its options
// are WithPolicies, which every program should give, WithMeterProvider
// and WithBuckets.
func New(opts ...Option) (*Metrics, error) {
	c := config{buckets: DefaultBuckets}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", floodgate.ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	meter := c.provider.Meter(ScopeName)
	m := &Metrics{
		policies: metricsbase.NewPolicies(func(p *metricsbase.Policy[policyCounters]) {
			for o := range p.V.attrs {
				p.V.attrs[o] = metric.WithAttributeSet(attribute.NewSet(PolicyKey.String(p.Name), OutcomeKey.String(outcomeValues[o])))
			}
			p.V.policy = metric.WithAttributeSet(attribute.NewSet(PolicyKey.String(p.Name)))
		}),
		limiters: metricsbase.NewRegistry(ErrDuplicateName, newWatched),
		gates:    newGates(),
		now:      time.Now,
	}
	if err := m.policies.Declare(c.policies); err != nil {
		return nil, fmt.Errorf("otelmetrics: WithPolicies: %w", err)
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.duration, err = meter.Float64Histogram("floodgate.decision.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a limiter registered with Limiter took to decide."),
		metric.WithExplicitBucketBoundaries(c.buckets...))
	add(err)
	m.decisions, err = meter.Int64ObservableCounter("floodgate.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions by policy and outcome (allowed, denied, dry_run_denied, error, skipped)."))
	add(err)
	m.capped, err = meter.Int64ObservableCounter("floodgate.capped_charges", metric.WithUnit("{charge}"),
		metric.WithDescription("Calls whose real cost took their key to the most it may owe (WithMaxDebt): charged up to that bound, the rest forgiven."))
	add(err)
	m.keys, err = meter.Int64ObservableUpDownCounter("floodgate.store.key.count", metric.WithUnit("{key}"),
		metric.WithDescription("Keys held by the limiter's in-memory store."))
	add(err)
	m.maxKeys, err = meter.Int64ObservableUpDownCounter("floodgate.store.key.limit", metric.WithUnit("{key}"),
		metric.WithDescription("Bound on the keys of the limiter's in-memory store (WithMaxKeys)."))
	add(err)
	m.evictions, err = meter.Int64ObservableCounter("floodgate.store.evictions", metric.WithUnit("{eviction}"),
		metric.WithDescription("Keys dropped from the in-memory store to make room; live ones still held state (kept as debt unless WithForgetEvicted)."))
	add(err)
	m.debtCapacity, err = meter.Int64ObservableUpDownCounter("floodgate.store.debt.limit", metric.WithUnit("{debt}"),
		metric.WithDescription("Debts the in-memory store's debt memory holds each in an entry of its own (WithDebtMemory): the key spray it absorbs without a stranger waiting."))
	add(err)
	m.debtsLost, err = meter.Int64ObservableCounter("floodgate.store.lost_debts", metric.WithUnit("{debt}"),
		metric.WithDescription("Debts of live evictions that found no entry of their own in the full debt memory: merged ones bind strangers until they run out, forgotten ones freed a client."))
	add(err)
	m.fallbackActive, err = meter.Int64ObservableGauge("floodgate.redis.fallback.active", metric.WithUnit("1"),
		metric.WithDescription("1 while the Redis limiter's decisions go to its fallback limiter, else 0."))
	add(err)
	m.fallbackDecisions, err = meter.Int64ObservableCounter("floodgate.redis.fallback.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of the Redis limiter that its fallback limiter made."))
	add(err)
	m.denyCacheHits, err = meter.Int64ObservableCounter("floodgate.redis.deny_cache.hits", metric.WithUnit("{hit}"),
		metric.WithDescription("Denials the Redis limiter answered from its deny cache, without a round trip."))
	add(err)
	m.redisErrors, err = meter.Int64ObservableCounter("floodgate.redis.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed Redis round trips, by error.type: timeout, canceled (the caller gave up) or other."))
	add(err)
	m.lease, err = newLeaseInstruments(meter)
	add(err)
	m.kinds, err = newKindsInstruments(meter)
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelmetrics: creating instruments: %w", err)
	}
	observed := append([]metric.Observable{m.decisions, m.capped, m.keys, m.maxKeys, m.evictions, m.debtCapacity, m.debtsLost,
		m.fallbackActive, m.fallbackDecisions, m.denyCacheHits, m.redisErrors}, m.lease.all()...)
	observed = append(observed, m.kinds.all()...)
	if _, err := meter.RegisterCallback(m.observe, observed...); err != nil {
		return nil, fmt.Errorf("otelmetrics: registering the callback: %w", err)
	}
	return m, nil
}

// observe is the callback of the observable instruments.
func (m *Metrics) observe(_ context.Context, o metric.Observer) error {
	for p := range m.policies.All() {
		pc := &p.V
		for i := range metricsbase.NumOutcomes {
			if i == metricsbase.Skipped && !pc.skips.Load() {
				continue
			}
			o.ObserveInt64(m.decisions, clamp(pc.n[i].Load()), pc.attrs[i])
		}
		o.ObserveInt64(m.capped, clamp(pc.capped.Load()), pc.policy)
	}
	for _, w := range m.limiters.All() {
		if w.Store != nil {
			s := w.Store()
			o.ObserveInt64(m.keys, int64(s.Keys), w.limiter)
			o.ObserveInt64(m.maxKeys, int64(s.MaxKeys), w.limiter)
			o.ObserveInt64(m.evictions, clamp(s.EvictedIdle), w.idle)
			o.ObserveInt64(m.evictions, clamp(s.EvictedLive), w.live)
			o.ObserveInt64(m.debtCapacity, int64(s.DebtCapacity), w.limiter)
			o.ObserveInt64(m.debtsLost, clamp(s.Merged), w.merged)
			o.ObserveInt64(m.debtsLost, clamp(s.Forgotten), w.forgotten)
		}
		if w.Redis != nil {
			s := w.Redis()
			active := int64(0)
			if s.FallbackActive {
				active = 1
			}
			o.ObserveInt64(m.fallbackActive, active, w.limiter)
			o.ObserveInt64(m.fallbackDecisions, clamp(s.FallbackDecisions), w.limiter)
			o.ObserveInt64(m.denyCacheHits, clamp(s.DenyCacheHits), w.limiter)
			o.ObserveInt64(m.redisErrors, clamp(s.TimeoutErrors), w.timeout)
			o.ObserveInt64(m.redisErrors, clamp(s.CanceledErrors), w.canceled)
			o.ObserveInt64(m.redisErrors, clamp(s.OtherErrors), w.other)
		}
		if w.Lease != nil {
			m.lease.observe(o, w.Lease(), w.limiter)
		}
	}
	m.observeKinds(o)
	return nil
}

// clamp converts a count to the int64 the instruments take; no count
// reaches 2^63, but a conversion that could wrap negative is not left to
// chance.
func clamp(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// Hook returns a function for floodgate.WithDecisionHook that counts each
// decision of the middleware under its policy and outcome:
//
//   - Err set (other than floodgate.ErrCostExceedsLimit): error;
//   - Decision.Allowed: allowed;
//   - denied and Blocked: denied;
//   - denied and not Blocked (WithDryRun): dry_run_denied.
//
// A request whose key function failed is counted under the policy whose
// key function failed (the last one tried when none yields a key). Under WithCountStatus each request is counted
// once, by the check before its handler runs; the consumption after the
// handler (DecisionEvent.AfterHandler) is not counted again; a
// settlement whose charge the key's debt limits capped
// (DecisionEvent.DebtCapped) is counted in floodgate.capped_charges. The
// same
// function may serve several middlewares: give each its own policy names
// (WithPolicyName), or their decisions add up under one.
func (m *Metrics) Hook() func(floodgate.DecisionEvent) {
	h := m.policies.NewHook()
	return func(ev floodgate.DecisionEvent) {
		if c, o, ok := h.Resolve(&ev); ok {
			c.n[o].Add(1)
		} else if c, ok := h.Capped(&ev); ok {
			c.capped.Add(1)
		}
	}
}

// Observe counts a decision made outside the middleware, from business
// code: error if err is set (other than floodgate.ErrCostExceedsLimit),
// else allowed or denied. policy must be a fixed name, such as the
// middleware's policy names, never a client key.
func (m *Metrics) Observe(policy string, d floodgate.Decision, err error) {
	m.policies.Get(policy).V.n[metricsbase.Classify(d.Allowed, err)].Add(1)
}

// Skip wraps a predicate for floodgate.WithSkip so that each request it
// exempts is counted under policy with outcome skipped. The middleware
// asks its skip predicates in order and stops at the first that exempts a
// request, so a request is counted at most once; it asks them before
// WithOnly, so a predicate that matches requests outside the limited
// routes counts those too. A nil skip returns nil, which WithSkip refuses.
func (m *Metrics) Skip(policy string, skip func(*http.Request) bool) func(*http.Request) bool {
	if skip == nil {
		return nil
	}
	pc := &m.policies.Get(policy).V
	pc.skips.Store(true)
	return func(r *http.Request) bool {
		if skip(r) {
			pc.n[metricsbase.Skipped].Add(1)
			return true
		}
		return false
	}
}
