// Package prommetrics exports floodgate's decisions and limiter state to
// Prometheus, as a prometheus.Collector. It is a module of its own, so
// that floodgate itself does not depend on the Prometheus client.
//
// # Use
//
// Build a Metrics with the names of your policies, register it, and hand
// its hook to each middleware:
//
//	m, err := prommetrics.New(prommetrics.WithPolicies("user_id_probe", "nickname"))
//	if err != nil { … }
//	prometheus.MustRegister(m)
//
//	limit := floodgate.Middleware(probes,
//		floodgate.WithPolicyName("user_id_probe"),
//		floodgate.WithDecisionHook(m.Hook()))
//
// Register the limiters whose state you want to see, under names of your
// choosing: Watch for in-memory limiters (nothing is added to their
// decisions), Limiter for Redis limiters, whose decision time it records:
//
//	err = m.Watch("probe", probes)                 // *floodgate.TokenBucket
//	signups, err := m.Limiter("signup", redisLim)  // *redisstore.SlidingLog
//
// From business code, count a decision the middleware did not make with
// Observe:
//
//	d, err := signups.AllowN(ctx, pattern, 1)
//	m.Observe("nickname", d, err)
//
// # Metrics
//
//	floodgate_decisions_total{policy, outcome}        counter: outcome is allowed, denied,
//	                                                  dry_run_denied, error or skipped
//	floodgate_decision_duration_seconds{limiter}      histogram, for limiters wrapped by Limiter
//	floodgate_store_keys{limiter}                     gauge: keys in an in-memory store
//	floodgate_store_max_keys{limiter}                 gauge: its bound (WithMaxKeys)
//	floodgate_store_evictions_total{limiter, kind}    counter: kind is idle or live
//	floodgate_store_debt_capacity{limiter}            gauge: debts the store remembers apart
//	floodgate_store_debts_lost_total{limiter, kind}   counter: kind is merged or forgotten
//	floodgate_redis_fallback_active{limiter}          gauge: 1 while the fallback decides
//	floodgate_redis_fallback_decisions_total{limiter} counter
//	floodgate_redis_deny_cache_hits_total{limiter}    counter
//	floodgate_redis_errors_total{limiter, kind}       counter: kind is timeout, canceled or other
//	floodgate_redis_lease_local_decisions_total{limiter}  counter: allowed from a lease
//	floodgate_redis_leases_total{limiter}                 counter: round trips that leased
//	floodgate_redis_lease_units_total{limiter}            counter: units leased
//	floodgate_redis_lease_returned_units_total{limiter}   counter: given back unused
//	floodgate_redis_lease_stranded_units_total{limiter}   counter: lost as if used
//	floodgate_redis_lease_ahead_units_total{limiter}      counter: refill skipped (token bucket)
//	floodgate_capped_charges_total{policy}                counter: charges capped by the debt limits
//	floodgate_waiting_calls{gate}                         gauge: calls held for their turn (WatchGate)
//	floodgate_inflight_slots{limiter}                     gauge: an in-flight limit's slots held now
//	floodgate_inflight_max_slots{limiter}                 gauge: its Max
//	floodgate_redis_inflight_lost_leases_total{limiter}   counter: a Redis in-flight limit's lost leases
//
// The lease series exist for the Redis limiters built with
// redisstore.WithLease, and only for those. The waiting calls are those
// of the gates given a floodgate.GateStats (floodgate.WithGateStats)
// registered with WatchGate; the slots those of the in-flight limits
// registered with Watch or Limiter, the lost leases only for Redis ones.
//
// A live eviction drops a key that still owed (remembered as debt, or
// forgotten under floodgate.WithForgetEvicted): a rising
// floodgate_store_evictions_total{kind="live"} means the store is too
// small for the traffic, or that someone is spraying keys. Each such debt
// is remembered exactly until floodgate_store_debt_capacity of them are
// held; past that, floodgate_store_debts_lost_total counts those that had
// to be merged into bounds that make new clients wait (kind="merged") or
// were forgotten (kind="forgotten"). Alert on both, and on
// floodgate_redis_fallback_active, whose limits are per instance.
//
// # Series from the start
//
// Each outcome of each policy named by WithPolicies is a series at 0
// from the first scrape. Prometheus's increase() and rate() measure a
// counter from its first sample: a series that only appeared with its
// first decision would start at that decision's count, and the first
// burst of an attack would never reach a rate-based alert. A policy not
// declared is still counted, from its first decision on.
//
// # Outcomes
//
// The hook maps floodgate.DecisionEvent to an outcome: an error (Err set,
// other than floodgate.ErrCostExceedsLimit, which is a denial); allowed;
// denied when the request was refused; dry_run_denied when it was denied
// but let through by WithDryRun. Skipped requests never reach the hook, so
// the middleware cannot report them: wrap the WithSkip predicate with
// Skip to count them. A request whose key function failed is
// counted under the policy whose key function failed.
//
// # Cost and cardinality
//
// Counting a decision costs an atomic add, after a lock-free map lookup
// that each hook skips while its policy stays the same, with no
// allocation (BenchmarkHookOverhead; the repository's docs/adapters.md
// has the figures). The store and Redis metrics are read from each
// limiter's Stats when Prometheus scrapes, never on the request path. Timing an in-memory
// decision with Limiter costs more than the decision itself (reading the
// clock twice), which is why Watch exists.
//
// Label values are the names given to Watch and Limiter, and the policy
// names the middleware or Observe reports; never a key or an address.
// Registering two limiters under one name is an error (ErrDuplicateName).
// At most MaxPolicies policy names get series of their own; later ones,
// and names that are not printable ASCII, are counted under OtherPolicy.
package prommetrics
