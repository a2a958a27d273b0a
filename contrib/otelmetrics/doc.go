// Package otelmetrics exports floodgate's decisions and limiter state
// through OpenTelemetry metric instruments, from a metric.MeterProvider
// (the global one by default). It is a module of its own, so that
// floodgate itself does not depend on OpenTelemetry.
//
// # Use
//
// Build a Metrics once the provider is set up, and hand its hook to each
// middleware:
//
//	m, err := otelmetrics.New(otelmetrics.WithPolicies("user_id_probe", "nickname"))
//	// and otelmetrics.WithMeterProvider(mp) for a provider other than the global one
//	if err != nil { … }
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
// # Instruments
//
// All come from the meter named ScopeName.
//
//	floodgate.decisions                 counter {decision}; floodgate.policy, floodgate.outcome
//	                                    (allowed, denied, dry_run_denied, error, skipped)
//	floodgate.decision.duration         histogram s; floodgate.limiter (limiters wrapped by Limiter)
//	floodgate.store.key.count           up-down counter {key}; floodgate.limiter
//	floodgate.store.key.limit           up-down counter {key}; floodgate.limiter
//	floodgate.store.evictions           counter {eviction}; floodgate.limiter, floodgate.eviction.kind (idle, live)
//	floodgate.store.debt.limit      up-down counter {debt}; floodgate.limiter
//	floodgate.store.lost_debts          counter {debt}; floodgate.limiter, floodgate.debt.kind (merged, forgotten)
//	floodgate.redis.fallback.active     gauge 1; floodgate.limiter: 1 while the fallback decides
//	floodgate.redis.fallback.decisions  counter {decision}; floodgate.limiter
//	floodgate.redis.deny_cache.hits     counter {hit}; floodgate.limiter
//	floodgate.redis.errors              counter {error}; floodgate.limiter, error.type (timeout, canceled, other)
//	floodgate.redis.lease.local_decisions  counter {decision}; floodgate.limiter: allowed from a lease
//	floodgate.redis.leases                 counter {lease}; floodgate.limiter: round trips that leased
//	floodgate.redis.lease.units            counter {unit}; floodgate.limiter: units leased
//	floodgate.redis.lease.returned_units   counter {unit}; floodgate.limiter: given back unused
//	floodgate.redis.lease.stranded_units   counter {unit}; floodgate.limiter: lost as if used
//	floodgate.redis.lease.ahead_units      counter {unit}; floodgate.limiter: refill skipped (token bucket)
//	floodgate.capped_charges               counter {charge}; floodgate.policy: charges capped by the debt limits
//	floodgate.waiting_call.count           up-down counter {call}; floodgate.gate: held for their turn (WatchGate)
//	floodgate.inflight.slot.count          up-down counter {slot}; floodgate.limiter: an in-flight limit's slots held
//	floodgate.inflight.slot.limit          up-down counter {slot}; floodgate.limiter: its Max
//	floodgate.redis.inflight.lost_leases   counter {lease}; floodgate.limiter: a Redis in-flight limit's lost leases
//
// The lease instruments report the Redis limiters built with
// redisstore.WithLease, and only those. The waiting calls are those of
// the gates given a floodgate.GateStats (floodgate.WithGateStats)
// registered with WatchGate; the slots those of the in-flight limits
// registered with Watch or Limiter, the lost leases only for Redis ones.
//
// The names follow OpenTelemetry's naming rules for metrics: no
// pluralized up-down counter (….key.count, ….key.limit), counters
// pluralized after the unit they count, no total.
//
// Each outcome of each policy named by WithPolicies is reported at 0 from
// the first collection, so that a rate computed over the counter counts
// a policy's first burst; a policy not declared is reported from its
// first decision on.
//
// Every instrument but the histogram is observable: the decision counts
// are kept in atomics by the hook and reported, like the limiters' Stats,
// by one callback when the SDK collects. A rising
// floodgate.store.evictions with kind live means the store is too small
// for the traffic, or that someone is spraying keys; each such debt is
// remembered exactly until floodgate.store.debt.limit of them are
// held, and past that floodgate.store.lost_debts counts those merged into
// bounds that make new clients wait, or forgotten.
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
// allocation. The histogram records synchronously with attributes built
// once per limiter; timing an in-memory decision costs more than the
// decision itself, which is why Watch exists.
//
// Attribute values are the names given to Watch and Limiter, and the
// policy names the middleware or Observe reports; never a key or an
// address. Registering two limiters under one name is an error
// (ErrDuplicateName). At most MaxPolicies policy names get streams of
// their own; later ones, and names that are not printable ASCII, are
// counted under OtherPolicy.
package otelmetrics
