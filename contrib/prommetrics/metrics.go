package prommetrics

import (
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrDuplicateName is wrapped by the error of Limiter and Watch when the
// name is already registered with the same Metrics: two limiters under
// one name would add up into one series and hide each other. It wraps
// floodgate.ErrInvalidOption.
var ErrDuplicateName = fmt.Errorf("%w: name already registered", floodgate.ErrInvalidOption)

// OtherPolicy is the policy label under which decisions are counted when
// their policy name cannot be a label of its own: a name that is not
// printable ASCII, or a new name once MaxPolicies names have been seen.
// It keeps a program that passes a client key as the policy name to
// Observe from growing a series per client. Its value is "(other)".
const OtherPolicy = metricsbase.OtherPolicy

// MaxPolicies bounds the distinct policy names counted, and so the series
// of floodgate_decisions_total: four per policy, plus one for each policy
// given to Skip.
const MaxPolicies = metricsbase.MaxPolicies

// DefaultBuckets are the upper bounds, in seconds, of the decision latency
// histogram: from 100 µs, a Redis round trip on a local network, to 1 s,
// ten times redisstore's default timeout.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// The outcome label values of floodgate_decisions_total.
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

// outcomeLabels are the outcome label values, indexed by outcome.
var outcomeLabels = [metricsbase.Skipped]string{OutcomeAllowed, OutcomeDenied, OutcomeDryRunDenied, OutcomeError}

// Option configures New.
type Option func(*config) error

type config struct {
	policies []string
	buckets  []float64
}

// WithPolicies declares the policies whose decisions will be counted:
// the names given to floodgate.WithPolicyName (floodgate.DefaultPolicyName
// when none is), to each floodgate.Policy of a PolicySelector or Routes,
// and to Observe. Each of their outcomes (allowed, denied, dry_run_denied,
// error) is a series at 0 from the first scrape on, before its first
// decision, so that rate() and increase() count the first burst: they
// measure a counter from its first sample, and a series that only
// appears with its first decision hides that decision, which is how a new
// attack's first wave would miss an alert. A policy not declared is still
// counted, from its first decision on. Names must be non-empty printable
// ASCII, as floodgate requires, and at most MaxPolicies in all; New
// refuses others with an error wrapping floodgate.ErrInvalidOption. Given
// more than once, the lists add up.
func WithPolicies(names ...string) Option {
	return func(c *config) error {
		c.policies = append(c.policies, names...)
		return nil
	}
}

// WithBuckets sets the upper bounds, in seconds, of the decision latency
// histogram's buckets (default DefaultBuckets). They must be finite and
// strictly increasing; the +Inf bucket is always added.
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

// Metrics counts floodgate's decisions and reports its limiters' state to
// Prometheus; it is a prometheus.Collector. Register it once
// (prometheus.MustRegister(m), or a registry of your own), then feed it:
//
//   - decisions, from the middleware with WithDecisionHook(m.Hook()) and
//     from business code with Observe, counted by policy and outcome in
//     floodgate_decisions_total;
//   - exemptions, by wrapping WithSkip's predicate with Skip;
//   - limiters, with Limiter (latency, store and Redis state) or Watch
//     (store and Redis state only), under a name of your choosing;
//   - the calls a middleware or interceptor holds for their turn, with
//     WatchGate.
//
// Counting a decision costs one atomic add, after a lock-free map lookup
// that each hook skips while its policy stays the same. Store sizes and Redis state are read from the limiters' Stats when
// Prometheus scrapes, never on the request path. A Metrics is safe for
// concurrent use.
type Metrics struct {
	decisions *prometheus.CounterVec
	capped    *prometheus.CounterVec
	duration  *prometheus.HistogramVec

	policies *metricsbase.Policies[policyCounters]
	limiters *metricsbase.Registry[redisstore.Stats, redisstore.LeaseStats, *watched]
	gates    *metricsbase.Gates[struct{}]

	now func() time.Time // the latency clock; tests replace it
}

// policyCounters are one policy's decision counters, by outcome, and its
// count of capped charges, resolved once so that counting needs no label
// lookup. The skipped series is made by Skip alone, so that only the
// policies given to Skip have one.
type policyCounters struct {
	outcome [metricsbase.Skipped]prometheus.Counter
	capped  prometheus.Counter
}

// The descriptors of the metrics read at scrape time.
var (
	storeKeysDesc = prometheus.NewDesc("floodgate_store_keys",
		"Keys held by the limiter's in-memory store.", []string{"limiter"}, nil)
	storeMaxKeysDesc = prometheus.NewDesc("floodgate_store_max_keys",
		"Bound on the keys of the limiter's in-memory store (WithMaxKeys).", []string{"limiter"}, nil)
	storeEvictionsDesc = prometheus.NewDesc("floodgate_store_evictions_total",
		"Keys dropped from the in-memory store to make room; kind=live ones still held state (kept as debt unless WithForgetEvicted).",
		[]string{"limiter", "kind"}, nil)
	storeDebtCapacityDesc = prometheus.NewDesc("floodgate_store_debt_capacity",
		"Debts the in-memory store's debt memory holds each in an entry of its own (WithDebtMemory): the key spray it absorbs without a stranger waiting.",
		[]string{"limiter"}, nil)
	storeDebtsLostDesc = prometheus.NewDesc("floodgate_store_debts_lost_total",
		"Debts of live evictions that found no entry of their own in the full debt memory: kind=merged ones now bind strangers until they run out, kind=forgotten ones freed a client (WithForgetOverflow, WithForgetEvicted).",
		[]string{"limiter", "kind"}, nil)
	fallbackActiveDesc = prometheus.NewDesc("floodgate_redis_fallback_active",
		"1 while the Redis limiter's decisions go to its fallback limiter, else 0.", []string{"limiter"}, nil)
	fallbackDecisionsDesc = prometheus.NewDesc("floodgate_redis_fallback_decisions_total",
		"Decisions of the Redis limiter that its fallback limiter made.", []string{"limiter"}, nil)
	denyCacheHitsDesc = prometheus.NewDesc("floodgate_redis_deny_cache_hits_total",
		"Denials the Redis limiter answered from its deny cache, without a round trip.", []string{"limiter"}, nil)
	redisErrorsDesc = prometheus.NewDesc("floodgate_redis_errors_total",
		"Failed Redis round trips, by kind: timeout, canceled (the caller gave up) or other.", []string{"limiter", "kind"}, nil)
)

// New returns a Metrics; register it with Prometheus before use. Its
// options are WithPolicies, which every program should give, and
// WithBuckets.
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
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Rate-limit decisions by policy and outcome (allowed, denied, dry_run_denied, error, skipped).",
		}, []string{"policy", "outcome"}),
		capped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_capped_charges_total",
			Help: "Calls whose real cost took their key to the most it may owe (WithMaxDebt): charged up to that bound, the rest forgiven.",
		}, []string{"policy"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_decision_duration_seconds",
			Help:    "Time a limiter registered with Limiter took to decide.",
			Buckets: c.buckets,
		}, []string{"limiter"}),
		limiters: metricsbase.NewRegistry(ErrDuplicateName, newWatched),
		gates:    newGates(),
		now:      time.Now,
	}
	m.policies = metricsbase.NewPolicies(func(p *metricsbase.Policy[policyCounters]) {
		for o := range p.V.outcome {
			p.V.outcome[o] = m.decisions.WithLabelValues(p.Name, outcomeLabels[o])
		}
		p.V.capped = m.capped.WithLabelValues(p.Name)
	})
	if err := m.policies.Declare(c.policies); err != nil {
		return nil, fmt.Errorf("prommetrics: WithPolicies: %w", err)
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.capped.Describe(ch)
	m.duration.Describe(ch)
	for _, d := range []*prometheus.Desc{storeKeysDesc, storeMaxKeysDesc, storeEvictionsDesc,
		storeDebtCapacityDesc, storeDebtsLostDesc, fallbackActiveDesc, fallbackDecisionsDesc, denyCacheHitsDesc, redisErrorsDesc} {
		ch <- d
	}
	for _, d := range leaseDescs {
		ch <- d
	}
	for _, d := range kindsDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It reads every registered
// limiter's Stats.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.capped.Collect(ch)
	m.duration.Collect(ch)
	for _, w := range m.limiters.All() {
		if w.Store != nil {
			s := w.Store()
			ch <- prometheus.MustNewConstMetric(storeKeysDesc, prometheus.GaugeValue, float64(s.Keys), w.name)
			ch <- prometheus.MustNewConstMetric(storeMaxKeysDesc, prometheus.GaugeValue, float64(s.MaxKeys), w.name)
			ch <- prometheus.MustNewConstMetric(storeEvictionsDesc, prometheus.CounterValue, float64(s.EvictedIdle), w.name, "idle")
			ch <- prometheus.MustNewConstMetric(storeEvictionsDesc, prometheus.CounterValue, float64(s.EvictedLive), w.name, "live")
			ch <- prometheus.MustNewConstMetric(storeDebtCapacityDesc, prometheus.GaugeValue, float64(s.DebtCapacity), w.name)
			ch <- prometheus.MustNewConstMetric(storeDebtsLostDesc, prometheus.CounterValue, float64(s.Merged), w.name, "merged")
			ch <- prometheus.MustNewConstMetric(storeDebtsLostDesc, prometheus.CounterValue, float64(s.Forgotten), w.name, "forgotten")
		}
		if w.Redis != nil {
			s := w.Redis()
			active := 0.0
			if s.FallbackActive {
				active = 1
			}
			ch <- prometheus.MustNewConstMetric(fallbackActiveDesc, prometheus.GaugeValue, active, w.name)
			ch <- prometheus.MustNewConstMetric(fallbackDecisionsDesc, prometheus.CounterValue, float64(s.FallbackDecisions), w.name)
			ch <- prometheus.MustNewConstMetric(denyCacheHitsDesc, prometheus.CounterValue, float64(s.DenyCacheHits), w.name)
			ch <- prometheus.MustNewConstMetric(redisErrorsDesc, prometheus.CounterValue, float64(s.TimeoutErrors), w.name, "timeout")
			ch <- prometheus.MustNewConstMetric(redisErrorsDesc, prometheus.CounterValue, float64(s.CanceledErrors), w.name, "canceled")
			ch <- prometheus.MustNewConstMetric(redisErrorsDesc, prometheus.CounterValue, float64(s.OtherErrors), w.name, "other")
		}
		if w.Lease != nil {
			collectLease(ch, w.name, w.Lease())
		}
	}
	m.collectKinds(ch)
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
// (DecisionEvent.DebtCapped) is counted in floodgate_capped_charges_total.
// The same
// function may serve several middlewares: give each its own policy names
// (WithPolicyName), or their decisions add up under one.
func (m *Metrics) Hook() func(floodgate.DecisionEvent) {
	h := m.policies.NewHook()
	return func(ev floodgate.DecisionEvent) {
		if c, o, ok := h.Resolve(&ev); ok {
			c.outcome[o].Inc()
		} else if c, ok := h.Capped(&ev); ok {
			c.capped.Inc()
		}
	}
}

// Observe counts a decision made outside the middleware, from business
// code: error if err is set (other than floodgate.ErrCostExceedsLimit),
// else allowed or denied. policy must be a fixed name, such as the
// middleware's policy names, never a client key.
func (m *Metrics) Observe(policy string, d floodgate.Decision, err error) {
	m.policies.Get(policy).V.outcome[metricsbase.Classify(d.Allowed, err)].Inc()
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
	c := m.decisions.WithLabelValues(m.policies.Get(policy).Name, OutcomeSkipped)
	return func(r *http.Request) bool {
		if skip(r) {
			c.Inc()
			return true
		}
		return false
	}
}
