// Package floodgate rate-limits net/http services and business code.
//
// # Limiters
//
// A [Limiter] answers one question — may this key spend n units now? — with
// a [Decision] that says whether it may, how much quota remains, and how
// long to wait before retrying or before the quota is whole again:
//
//	lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 10, Period: 10 * time.Minute})
//	if err != nil { ... }                    // invalid rates are errors, never panics
//	d, err := lim.Allow(ctx, clientIP)
//	if err == nil && !d.Allowed {
//		// refuse; d.RetryAfter says when the same request can succeed
//	}
//
// The in-memory limiters are:
//
//   - [TokenBucket]: capacity burst (default Rate.Limit), refilled
//     continuously at Rate.Limit per Rate.Period, exactly as
//     golang.org/x/time/rate; [WithIntervalRefill] refills the whole quota
//     at once each period instead.
//   - [SlidingLog]: at most Rate.Limit events in any window of Rate.Period
//     ending now, exact; memory bounded by Rate.Limit timestamps per key.
//   - [SlidingCounter]: the two-window weighted estimate of a sliding window
//     in constant memory per key, for large limits.
//
// A Rate's Limit is at most 2^24 events per period (see [Rate] for larger
// rates), and each option may be given once: anything else is an error
// from the constructor.
//
// [NewInFlight] and [NewServiceInFlight] are in-flight (concurrency)
// limits: at most n calls of a key, or of the whole service, in the
// handler at once; a slot is released when the call settles.
//
// [All] combines limits on one key (10 per minute and 100 per hour), and
// [FromRateLimiter] turns one *rate.Limiter into a server-wide cap (at
// rate.Inf, no cap at all, also inside All). The
// same semantics hold on Redis (module
// github.com/floodgate-go/floodgate/redisstore), and the floodgatetest
// package checks any Limiter against them.
//
// # The store
//
// Each in-memory limiter keeps per-key state in a sharded, bounded table
// that holds [WithMaxKeys] keys (default [DefaultMaxKeys]), evicting in
// approximately least-recently-used order. Keys are hashed to 64 bits
// with a per-store random seed, so memory per key does not depend on the
// key and no request memory is retained. When the bound is reached, keys
// whose state equals a fresh one are dropped first; one that still holds
// state is counted in Stats().EvictedLive and its debt kept in a
// fixed-size memory (exactly while it has room, rounded up under
// pressure), so a key spray cannot buy a client a reset, and a client
// pushed out by one comes back charged what it spent, or more (see
// [WithDebtMemory] for its size and what happens past it, and
// [WithForgetEvicted] for the opposite trade-off).
// There are no background goroutines, and time comes from a monotonic
// clock unless [WithClock] injects one.
//
// # HTTP
//
// [Middleware] limits handlers: a [KeyFunc] names the client ([KeyByIP]
// trusts forwarding headers only from configured proxies), denied requests
// get 429 with Retry-After and a JSON body (RFC 9457 problem details by
// default, or the service's own envelope), and every response carries the
// IETF RateLimit-Policy and RateLimit headers. A failing limiter or store
// follows an explicit policy: fail closed (503) by default, or fail open;
// what the client caused (no key, a bad address or body) is a 400 under
// either, a misconfiguration a 500, any other error of a key or cost
// function a 503 under either — fail-open forgives only the limiter — and
// a client that hangs up mid-decision never reaches the handler
// ([ErrorStatus], [WithFailOpen]). A browser's
// CORS preflight costs nothing once a CORS handler has answered it, and a
// request merely dressed as one is counted ([WithLimitPreflights]).
// [NewMiddleware] reports invalid options as errors; [NewPolicyMiddleware]
// picks the limit per request with a [PolicySelector] — for sign-ups, the
// nickname pattern ([NormalizePattern]) when one can be formed, else the
// client IP with a more lenient limit. [NewRoutes] and
// [NewRouteMiddleware] give each route its own policies in one middleware,
// matched by an http.ServeMux itself so that the rule that applies is the
// route that runs (HEAD with GET, most specific pattern first);
// [MatchPattern] scopes a middleware to one pattern the same way. The
// nested modules contrib/grpclimit, contrib/connectlimit and
// contrib/ginlimit carry the same limits to gRPC servers, connect and gin.
//
// # Beyond a rate
//
// Three admission kinds work the same on every transport and store:
//
//   - The cost known after the response ([WithCostAfter]): a request is
//     admitted at an estimate and charged its real cost once answered —
//     what its handler reports ([ReportCost]), the bytes it sent
//     ([CostBytes]), a header ([CostHeader]). The key may go into debt
//     ([Charger]), and waits until it is paid; what concurrent requests
//     can over-spend is bounded by what was in flight.
//   - In-flight limits ([NewInFlight], [NewServiceInFlight], [Releaser]):
//     a slot held from admission until the call settles, also on a panic
//     or a hang-up; a service-wide cap answers 503 ([Decision].Overloaded).
//   - Waiting instead of refusing ([WithWait], [Reserver]): a request whose
//     turn comes within a maximum wait is held until then, within bounds
//     per key and in total, and gives its turn back if its client hangs
//     up.
//
// # Adapters: the admission core
//
// The middleware is an adapter over a transport-neutral core, [Gate],
// which other transports use in their own terms (no adapter builds
// another transport's request). An adapter does three things per call:
//
//  1. Key it. A [SelectorFor] holds [PolicyFor] values whose key functions
//     read the transport's own call type C (a gRPC interceptor's read the
//     peer and the metadata); its Call method returns the [Call] with the
//     policy that applies and the key, or why there is none. The adapter
//     adds the cost if it prices calls itself (0 stands for the gate's
//     WithCost), and the method and path for the log lines.
//  2. Admit it. [Gate.Admit] decides and returns an [Outcome] value:
//     allowed, denied, refused for the client's own error, misconfigured,
//     the limiter failed, the client hung up, or keying or pricing the
//     call failed with an error of its own — with the error policy
//     already applied (Outcome.Blocked), the [Decision], and the quota
//     values formatted once ([Quota]: header or metadata values, shared,
//     allocation-free). The adapter answers in its transport's terms: a
//     429 with headers, a ResourceExhausted status with trailers.
//  3. Settle it. If Outcome.NeedsSettle, the adapter runs the handler —
//     with the context [Outcome.Context] returns, which carries the meter
//     of [ReportCost] — and then calls [Gate.Settle] once with a [Result]
//     — whether the call counts, whether the handler panicked (it then
//     counts), what it cost if the adapter reads that from the response —
//     also when the handler panics. Settling releases in-flight slots and
//     charges the cost known after the call.
//
// The gate holds everything else, once: fail-closed, fail-open and
// dry-run, the list of errors that are the client's doing ([ErrorStatus]
// for HTTP), hang-ups, paced logging, the decision hook and the sampling
// of live evictions. [NewGate] takes the transport-neutral options
// ([WithCost], [WithFailOpen], [WithDryRun], [WithHeaders], [WithLogger],
// [WithDecisionHook], [WithRefundUncounted], [WithSettledCost], [WithWait]
// …). Admit allocates nothing of its own, and needs no *http.Request;
// under WithWait it may hold a call until its turn.
//
// # Files
//
// The package's files by layer, the way one request crosses them: the
// HTTP face calls the admission core, which asks a key function and a
// limiter; nothing below calls up. A file belongs to one layer, and the
// limiter files name none of the admission core's or the HTTP face's
// types (layers_test.go checks both).
//
//   - HTTP: middleware.go, middlewareoption.go, response.go, route.go,
//     policyselector.go, preflight.go, statuswriter.go, costafter.go,
//     forwardwarning.go.
//   - Admission: gate.go, gatelog.go, gatewait.go, gatestats.go,
//     settle.go, meter.go, policy.go, policyshare.go, quota.go,
//     headervalue.go.
//   - Keys: keyfunc.go, clientip.go, forwarded.go, formkey.go,
//     multipartcheck.go, pattern.go, prefixcover.go, plankey.go.
//   - Limiters: limiter.go, options.go, clock.go, capacity.go, charge.go,
//     debtlimit.go, reserve.go, wait.go, store.go, storetable.go,
//     debts.go, tokenbucket.go, tokenbucket_kinds.go, slidingwindow.go,
//     slidingwindow_kinds.go, slidingcounter.go, slidingcounter_kinds.go,
//     composite.go, composite_kinds.go, inflight.go, inflightstats.go,
//     limitershare.go, ratelimiter.go, ratechange.go, namespace.go,
//     plan.go, plancache.go, planfactory.go, planinplace.go, planslot.go.
package floodgate
