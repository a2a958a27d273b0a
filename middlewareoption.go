package floodgate

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// MiddlewareOption configures Middleware, NewMiddleware,
// NewPolicyMiddleware and NewRouteMiddleware, and the admission core of
// any transport (NewGate, which takes the options that are not net/http's
// own). Each option may be given once (WithSkip and WithOnly accumulate);
// a repeated or conflicting option is an error wrapping ErrInvalidOption.
type MiddlewareOption func(*middlewareConfig) error

type middlewareConfig struct {
	gateConfig
	// The net/http middleware's own: how a request is keyed, priced and
	// answered.
	key         KeyFunc
	policyName  string
	costFunc    func(*http.Request) (int, error)
	skip        []func(*http.Request) bool
	only        []func(*http.Request) bool
	denied      DeniedHandler
	onError     ErrorHandler
	countStatus func(status int) bool
	// responseCost reads a request's real cost from its response
	// (WithCostAfter).
	responseCost func(Response) (int, bool)
	preflights   bool // WithLimitPreflights
	given        map[string]bool
}

// once records that the option name was given and refuses a repeat: two
// WithCost options, say, are a mistake whichever one was meant to win.
func (c *middlewareConfig) once(name string) error {
	if c.given[name] {
		return fmt.Errorf("%w: %s given twice", ErrInvalidOption, name)
	}
	c.given[name] = true
	return nil
}

// WithKeyFunc sets how a request's key is formed (default: KeyByIP(), the
// TCP peer's address only, so no client can choose its own key; for a
// limit that ignores keys, NewServiceInFlight, none). Behind a
// proxy, pass a KeyByIP configured with the proxy's address (with a
// logger, the middleware warns when private or loopback peers send
// forwarding headers it does not trust). A key error the client caused
// (ErrNoKey, ErrNoClientIP, ErrInvalidBody, ErrKeyTooLong,
// ErrAmbiguousKey) is answered 400 (or 413) under every error policy; a
// key function that is misconfigured (an error wrapping ErrInvalidOption)
// gets 500; any other error of a key function (a lookup that failed) gets
// 503, also under WithFailOpen; see ErrorStatus. It cannot be used with
// NewPolicyMiddleware, whose policies carry their key functions.
func WithKeyFunc(f KeyFunc) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if f == nil {
			return fmt.Errorf("%w: WithKeyFunc: nil key function (a key function constructor returns nil with its error: check it)", ErrInvalidOption)
		}
		c.key = f
		return c.once("WithKeyFunc")
	}
}

// WithPolicyName sets the policy name shown in the RateLimit-Policy and
// RateLimit headers (default DefaultPolicyName). It must be printable
// ASCII. It cannot be used with NewPolicyMiddleware, whose policies carry
// their names.
func WithPolicyName(name string) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if err := validPolicyName(name); err != nil {
			return err
		}
		c.policyName = name
		return c.once("WithPolicyName")
	}
}

// WithCost sets the units every request costs (default 1). It must be
// positive: a request that cost nothing would never be limited. A cost
// above what the limiter can ever hold (its Capacity, for a limiter that
// implements Capacitor, as every limiter of this package does) would
// refuse every request, so NewMiddleware reports it as an error wrapping
// ErrInvalidOption and ErrCostExceedsLimit.
func WithCost(n int) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if n <= 0 || n > maxLimit {
			return fmt.Errorf("%w: cost %d must be in 1..%d", ErrInvalidOption, n, maxLimit)
		}
		c.cost = n
		return c.once("cost")
	}
}

// WithCostFunc makes the cost depend on the request, e.g. on the size of a
// batch. A cost of 0 lets the request through without consuming (it
// still gets the quota headers). A request it cannot price is refused
// under every error policy, fail-open included (dry-run aside): an error
// wrapping ErrInvalidBody (a body the client sent malformed) is answered
// 400, any other error 503, and a negative cost, a bug of the function,
// 500 (see ErrorStatus). It replaces WithCost; giving both is an error.
func WithCostFunc(f func(r *http.Request) (int, error)) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil cost function", ErrInvalidOption)
		}
		c.costFunc, c.priced = f, true
		c.given["WithCostFunc"] = true
		return c.once("cost")
	}
}

// WithSkip exempts the requests for which skip returns true, such as
// health checks: they reach the handler without a decision, headers or
// log line. Several WithSkip options exempt a request if any of them does.
func WithSkip(skip func(r *http.Request) bool) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if skip == nil {
			return fmt.Errorf("%w: nil skip predicate", ErrInvalidOption)
		}
		c.skip = append(c.skip, skip)
		c.given["WithSkip"] = true
		return nil
	}
}

// WithOnly limits only the requests for which match returns true and lets
// every other one through untouched, e.g.
// WithOnly(MatchRoute(http.MethodGet, "/auth/available/user_id")) wrapped
// around a whole mux. Several WithOnly options limit a request only if all
// of them match.
func WithOnly(match func(r *http.Request) bool) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if match == nil {
			return fmt.Errorf("%w: nil match predicate", ErrInvalidOption)
		}
		c.only = append(c.only, match)
		c.given["WithOnly"] = true
		return nil
	}
}

// WithDeniedHandler replaces the response to a denied request (default
// ProblemDetails, RFC 9457 problem+json). StaticJSON builds one for a
// service's own JSON envelope.
func WithDeniedHandler(h DeniedHandler) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if h == nil {
			return fmt.Errorf("%w: nil denied handler", ErrInvalidOption)
		}
		c.denied = h
		return c.once("WithDeniedHandler")
	}
}

// WithFailOpen lets a request through when the limiter or its store
// fails (Redis down, say), after logging the error. The default is to
// fail closed (FailClosed: 503), because the limiter is a security
// control: failing open hands an attacker who can make it fail (a store
// overloaded on purpose) an unlimited endpoint. Choose fail-open where
// availability matters more than the limit, and watch the error log or
// the decision hook.
//
// Fail-open never covers what the client can cause or the server must
// fix, since those would be free passes on demand: a key error of the
// client's doing is answered 400 (or 413), a misconfiguration 500, and
// any other error of a key or cost function 503 (see ErrorStatus): only
// the limiter's own errors are let through. Nor does it cover a client that went away while the
// limiter was deciding (the limiter then typically fails with the
// request's cancelled context): such a request never reaches the handler,
// under any error policy, and is answered StatusClientClosedRequest with
// no body. ErrCostExceedsLimit is never an error here: it is a denial.
func WithFailOpen() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.failOpen = true
		return c.once("error policy")
	}
}

// WithErrorHandler answers requests on which no decision can be made with
// h instead of FailClosed; h sees the error, and may delegate to
// FailClosed for the cases it does not handle, or answer in the service's
// own envelope with the status ErrorStatus gives (4xx for the client's
// own doing, 500 for a misconfiguration, 503 for a failed limiter). The
// handler being limited is not called, and neither is h for a request
// whose client went away (see WithFailOpen). It conflicts with
// WithFailOpen and WithDryRun.
func WithErrorHandler(h ErrorHandler) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if h == nil {
			return fmt.Errorf("%w: nil error handler", ErrInvalidOption)
		}
		c.onError = h
		c.given["WithErrorHandler"] = true
		return c.once("error policy")
	}
}

// WithHeaders selects the quota headers (default HeadersIETF).
func WithHeaders(style HeaderStyle) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if style < HeadersIETF || style > HeadersNone {
			return fmt.Errorf("%w: unknown header style %d", ErrInvalidOption, style)
		}
		c.headers = style
		return c.once("WithHeaders")
	}
}

// WithLogger logs through l. The default is not to log: a library should
// not write to a program's output unasked (with one exception: a
// misconfiguration found at request time is logged with slog.Default
// when no logger is set, since it refuses every request it touches).
//
//   - each denial at WARN (message "rate limit exceeded", with the
//     policy, key, method, path and retry delay);
//   - a failure of the limiter or its store at ERROR, at most one line a
//     second;
//   - a request refused for its own doing (ErrNoKey, ErrNoClientIP,
//     ErrInvalidBody, ErrKeyTooLong), or whose client went away during
//     the decision, at DEBUG, at most one line a second: these are the
//     client's problem, and an attacker sending garbage must not fill the
//     log;
//   - a misconfiguration (ErrInvalidOption from a key function, such as
//     KeyByRoutePattern outside a ServeMux, with the fix in its message)
//     at ERROR, at most one line a minute;
//   - at WARN, at most one line a minute each: forwarding headers
//     (X-Forwarded-For, X-Real-IP, Forwarded) sent by a private or
//     loopback peer while the key is that peer's own address, which
//     usually means KeyByIP lacks TrustProxies and every client behind
//     the proxy shares one limit; and live limits evicted from an
//     in-memory limiter's store (its Stats().EvictedLive grew), which
//     means the store is too small (WithMaxKeys) or someone is spraying
//     keys — a line that names WithDebtMemory when the spray went past
//     the debt memory's size too (Stats().Merged or Forgotten grew: fresh
//     keys may start limited, or limited ones were freed). Both are
//     looked at at most once a second.
//
// A flood does not flood the log: after a line for a key, further denials
// of that key are counted, not logged, until its reset period
// (Decision.ResetAfter, at least a second) has passed; the next line
// reports them as "suppressed". The keys remembered for this are bounded
// (WithLogKeys); when all of them are still within their periods, denials
// of new keys are dropped and reported as "suppressed_other" on the next
// line written. The paced lines above carry the same kind of count.
func WithLogger(l *slog.Logger) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		c.logger = l
		return c.once("WithLogger")
	}
}

// WithLogKeys bounds the number of keys the denial log remembers (default
// DefaultLogKeys), and so its memory. It requires WithLogger.
func WithLogKeys(n int) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if n <= 0 {
			return fmt.Errorf("%w: log keys %d must be positive", ErrInvalidOption, n)
		}
		c.logKeys = n
		return c.once("WithLogKeys")
	}
}

// WithDecisionHook calls hook for every decision the middleware makes (not
// for skipped requests), before the response is written and outside any
// lock, so it may take its time but delays the request by as much. It
// suits metrics: count by Policy, Decision.Allowed, Blocked and Err.
func WithDecisionHook(hook func(DecisionEvent)) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if hook == nil {
			return fmt.Errorf("%w: nil decision hook", ErrInvalidOption)
		}
		c.hook = hook
		return c.once("WithDecisionHook")
	}
}

// WithDryRun decides, consumes, sets the quota headers, logs and calls the
// hook as usual, but never blocks: a denied request reaches the handler
// (without Retry-After), and so does a request on which no decision could
// be made, whatever the cause. Use it to try a new limit on live traffic.
// The one exception is a request whose client went away during the
// decision: nobody is left to answer, so it does not reach the handler.
// It conflicts with WithErrorHandler.
func WithDryRun() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.dryRun = true
		return c.once("WithDryRun")
	}
}

// WithCountStatus counts only the requests whose response status makes
// counts return true, e.g. only failed logins:
//
//	WithCountStatus(func(s int) bool { return s == 401 || s == 403 })
//
// Before the handler runs, the middleware reserves the request's cost,
// exactly as without this option, and denies the request if the quota
// cannot hold it (the handler is not called). After the handler returns,
// it gives the cost back (Refunder) if the status does not count. So no
// more requests than the quota holds are ever in flight: 50 concurrent
// wrong passwords against a quota of 5 reach the handler 5 times. A
// handler that panics (http.ErrAbortHandler included) is counted, whatever
// it wrote, and the panic goes on up. The quota headers show the state
// after the reservation.
//
// Every policy's limiter must implement Refunder (all of this package's
// and redisstore's do, except SharedLimiter); NewMiddleware refuses one
// that does not. A Composite gives back to those of its limiters that
// can: a SharedLimiter inside one keeps what it took. The
// handler sees a wrapped ResponseWriter that keeps http.Flusher,
// http.Hijacker, io.ReaderFrom and http.ResponseController working
// (Unwrap); a hijacked connection counts as status 101. It also
// implements DeferredSettler, for frameworks whose status may still
// change after the handler returns (ginlimit).
func WithCountStatus(counts func(status int) bool) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if counts == nil {
			return fmt.Errorf("%w: nil status predicate", ErrInvalidOption)
		}
		c.countStatus, c.settle = counts, true
		return c.once("WithCountStatus")
	}
}

// WithRefundUncounted is the transport-neutral half of WithCountStatus,
// for an adapter over a Gate whose outcomes are not HTTP statuses (a gRPC
// interceptor counting only some codes): each allowed call's cost is
// reserved, exactly as without it, and Gate.Settle gives it back when the
// adapter reports the call uncounted (Result.Uncounted). A handler that
// panics is counted. Every policy's limiter must implement Refunder. The
// net/http middleware does not take it: give WithCountStatus, whose
// predicate reads the status.
func WithRefundUncounted() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.settle = true
		return c.once("WithRefundUncounted")
	}
}

// WithLimitPreflights counts CORS preflight requests like any other
// request. By default a preflight — a request in the exact shape a
// browser sends on its own before a cross-origin request: OPTIONS, an
// Origin that is a serialized origin, one Access-Control-Request-Method,
// no body, no Authorization or Cookie — is decided as a request, its cost
// reserved, and given back once the handler has answered it as a
// preflight that succeeds in a browser: a 2xx carrying
// Access-Control-Allow-Origin, with no body. So an honest preflight,
// answered by a CORS handler inside the limit, never consumes quota (it
// would charge the user twice per real request), while a request merely
// dressed as one — at a handler that answers OPTIONS as it answers GET,
// with a body, a bare 401 or a 204 without CORS headers — stays counted,
// and no more of them than the quota holds are ever in flight. On a spent
// quota a preflight is refused with 429, which costs a browser nothing:
// in that placement the 429 of the real request carries no CORS headers
// either, so the page could not read it. The CORS handler belongs outside
// the limit (see the README's section on CORS); preflights then never
// reach it.
//
// A limiter that cannot give units back (no Refunder: SharedLimiter, or
// one of your own) counts preflights as under this option.
func WithLimitPreflights() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.preflights = true
		return c.once("WithLimitPreflights")
	}
}

// WithWallClock sets the clock the middleware reads for the legacy
// X-RateLimit-Reset timestamp and for pacing its log lines (default
// time.Now). It is meant for tests, together with the limiter's WithClock.
func WithWallClock(now func() time.Time) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.now = now
		return c.once("WithWallClock")
	}
}

func newMiddlewareConfig(opts []MiddlewareOption) (middlewareConfig, error) {
	c := middlewareConfig{
		gateConfig: gateConfig{
			cost:    1,
			headers: HeadersIETF,
			logKeys: DefaultLogKeys,
			now:     time.Now,
		},
		denied:  ProblemDetails,
		onError: FailClosed,
		given:   make(map[string]bool),
	}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil middleware option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if c.dryRun && c.given["error policy"] && !c.failOpen {
		return c, fmt.Errorf("%w: WithErrorHandler has no effect in dry-run, which never blocks", ErrInvalidOption)
	}
	if c.given["WithCountStatus"] && c.given["WithRefundUncounted"] {
		return c, fmt.Errorf("%w: WithCountStatus already counts by status; WithRefundUncounted is its half for adapters over a Gate", ErrInvalidOption)
	}
	if c.given["WithLogKeys"] && c.logger == nil {
		return c, fmt.Errorf("%w: WithLogKeys without WithLogger", ErrInvalidOption)
	}
	if c.given["WithWaitTimer"] && !c.given["WithWait"] {
		return c, fmt.Errorf("%w: WithWaitTimer without WithWait", ErrInvalidOption)
	}
	return c, nil
}

// httpOnly lists the options of the net/http middleware that an adapter
// over a Gate replaces with its transport's own.
var httpOnly = []string{"WithKeyFunc", "WithPolicyName", "WithCostFunc", "WithSkip", "WithOnly",
	"WithDeniedHandler", "WithErrorHandler", "WithCountStatus", "WithLimitPreflights", "WithCostAfter"}

// gateOnly refuses the options of the net/http middleware: given to a
// Gate, they would do nothing.
func (c *middlewareConfig) gateOnly() error {
	for _, name := range httpOnly {
		if c.given[name] {
			return fmt.Errorf("%w: %s is an option of the net/http middleware; an adapter over a Gate takes its transport's own", ErrInvalidOption, name)
		}
	}
	return nil
}
