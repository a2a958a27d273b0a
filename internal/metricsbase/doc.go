// Package metricsbase holds what floodgate's metrics adapters
// (contrib/prommetrics and contrib/otelmetrics) share and what does not
// depend on a metrics ecosystem: the outcome of a decision (outcome.go),
// the bounded table of policy names a hook counts under, declared up front
// so that their series exist at 0 before the first decision
// (policies.go),
// the registry of watched limiters (registry.go), the wrapper that times
// a limiter's decisions while keeping its optional interfaces (timed.go)
// and the check of histogram bounds (buckets.go). Their shared tests and
// benchmarks are in metricstest. Each adapter keeps its own names (Prometheus
// labels, OpenTelemetry attributes) and its own instruments.
//
// It lives in the root module, whose dependencies it must not change: it
// imports neither an ecosystem's client nor redisstore. What it needs of
// redisstore's limiters, their Stats and LeaseStats types, are type
// parameters the adapters fill in.
package metricsbase
