package floodgate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Middleware defaults.
const (
	// DefaultPolicyName names the policy of Middleware and NewMiddleware in
	// the quota headers unless WithPolicyName says otherwise.
	DefaultPolicyName = "default"
	// DefaultLogKeys is how many client keys the denial log remembers in
	// order to write at most one line per key per reset period (see
	// WithLogger). Each costs about 150 bytes plus the length of the key.
	DefaultLogKeys = 4096
)

// errorLogPeriod paces the log lines about errors (a store that is down
// fails every request) and about requests refused for the client's own
// doing: at most one line per period and kind, with a count of the lines
// suppressed in between.
const errorLogPeriod = time.Second

// configLogPeriod paces the log lines that ask for a configuration change
// (a misconfigured key function, untrusted forwarding headers, evictions
// of live limits): the condition holds for every request until someone
// acts, and one line a minute says so without burying the rest.
const configLogPeriod = time.Minute

// watchPeriod is how often the middleware looks, on the request path, at
// what the configuration warnings need (forwarding headers, the store's
// eviction count): at most once a second, so the check costs nothing
// measurable.
const watchPeriod = time.Second

// hookWatchOneIn: with a decision hook but no logger, the middleware looks
// at the store's evictions on one request in hookWatchOneIn, picked by the
// runtime's per-thread random source (no shared counter, no clock read on
// the others): reading the clock on every request would cost a metrics
// hook a third of the middleware's time. A key spray is a flood, so its
// evictions still reach the hook within a second or so.
const hookWatchOneIn = 64

// MiddlewareOption configures Middleware, NewMiddleware and
// NewPolicyMiddleware. Each option may be given once (WithSkip and WithOnly
// accumulate); a repeated or conflicting option is an error wrapping
// ErrInvalidOption.
type MiddlewareOption func(*middlewareConfig) error

type middlewareConfig struct {
	key         KeyFunc
	policyName  string
	cost        int
	costFunc    func(*http.Request) (int, error)
	skip        []func(*http.Request) bool
	only        []func(*http.Request) bool
	denied      DeniedHandler
	onError     ErrorHandler
	failOpen    bool
	headers     HeaderStyle
	logger      *slog.Logger
	logKeys     int
	hook        func(DecisionEvent)
	dryRun      bool
	countStatus func(status int) bool
	now         func() time.Time
	given       map[string]bool
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
// TCP peer's address only, so no client can choose its own key). Behind a
// proxy, pass a KeyByIP configured with the proxy's address (with a
// logger, the middleware warns when private or loopback peers send
// forwarding headers it does not trust). A key error the client caused
// (ErrNoKey, ErrNoClientIP, ErrInvalidBody, ErrKeyTooLong) is answered
// 400 (or 413) under every error policy; a key function that is
// misconfigured (an error wrapping ErrInvalidOption) gets 500; see
// ErrorStatus. It cannot be used with NewPolicyMiddleware, whose policies
// carry their key functions.
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
// still gets the quota headers); an error, or a negative cost, goes to the
// error policy. It replaces WithCost; giving
// both is an error.
func WithCostFunc(f func(r *http.Request) (int, error)) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil cost function", ErrInvalidOption)
		}
		c.costFunc = f
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
// client's doing is answered 400 (or 413), a misconfiguration 500 (see
// ErrorStatus). Nor does it cover a client that went away while the
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
//     keys. Both are looked at at most once a second.
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

// DecisionEvent describes one decision of the middleware, for metrics and
// audit. It is passed by value to the WithDecisionHook function.
type DecisionEvent struct {
	// Request is the request decided on.
	Request *http.Request
	// Policy is the name of the policy that decided. On a key error it is
	// the policy whose key function failed, or, when no policy applied
	// (ErrNoKey), the last one tried.
	Policy string
	// Key is the key the request was counted under; empty if none could
	// be formed.
	Key string
	// Cost is the number of units asked for.
	Cost int
	// Decision is the limiter's decision. With WithCountStatus, the first
	// event of an allowed request reports the reservation made before the
	// handler ran (its cost consumed).
	Decision Decision
	// Err is non-nil when no decision could be made (the error policy then
	// applied; ErrorStatus tells the client's doing from a failure) and is
	// ErrCostExceedsLimit when the request can never be allowed. When the
	// client went away during the decision, Err also wraps the request
	// context's error (context.Canceled, or context.DeadlineExceeded).
	Err error
	// Blocked reports that the request was refused and the handler not
	// called: a denial outside dry-run, an error outside fail-open's and
	// dry-run's reach, or a client that went away.
	Blocked bool
	// AfterHandler marks the second event of a request under
	// WithCountStatus: the handler's status did not count, so its cost was
	// given back (Err reports a refund that failed; the cost then stays
	// consumed). Decision is zero in this event.
	AfterHandler bool
	// EvictedLive is, when this decision sampled its limiter's Stats (at
	// most once a second; with a logger on the first request after that
	// second, with a hook alone on one request in 64 picked at random),
	// how many live limits the limiter's store evicted since the previous
	// sample: non-zero means the store is too small (WithMaxKeys) or under
	// a key spray. Each such eviction either went to the store's debt
	// memory, where it may limit fresh keys that share its slot, or, under
	// WithForgetEvicted, reset a client's limit.
	EvictedLive uint64
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
// (Unwrap); a hijacked connection counts as status 101.
func WithCountStatus(counts func(status int) bool) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if counts == nil {
			return fmt.Errorf("%w: nil status predicate", ErrInvalidOption)
		}
		c.countStatus = counts
		return c.once("WithCountStatus")
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

// Middleware returns a net/http middleware that limits requests with l:
// each request is keyed (WithKeyFunc, default the TCP peer's IP), asks l
// for its cost (WithCost, default 1), gets the quota headers, and is either
// passed to the handler or denied with 429 and Retry-After. The handler is
// never called for a denied request. See the With… options for the rest.
//
// Middleware is NewMiddleware for configurations known to be valid. It
// does not panic on an invalid one; it logs the error with slog.Default
// at ERROR and returns a middleware that answers every request with 500
// Internal Server Error, so that a misconfigured limit is loud and never
// silently lets requests through. Prefer NewMiddleware where the
// configuration comes from outside the program.
func Middleware(l Limiter, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	mw, err := NewMiddleware(l, opts...)
	if err != nil {
		slog.Default().Error("floodgate: invalid middleware configuration; every request will be refused with 500", "error", err)
		return func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, http.StatusInternalServerError, problemMisconfigured)
			})
		}
	}
	return mw
}

// NewMiddleware is Middleware that reports an invalid configuration (a nil
// limiter, an invalid, repeated or conflicting option, a WithCost above
// the limiter's Capacity, WithCountStatus on a limiter that cannot
// refund) as an error wrapping ErrInvalidOption.
func NewMiddleware(l Limiter, opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	c, err := newMiddlewareConfig(opts)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: nil limiter", ErrInvalidOption)
	}
	if c.key == nil {
		if c.key, err = KeyByIP(); err != nil {
			return nil, err
		}
	}
	if c.policyName == "" {
		c.policyName = DefaultPolicyName
	}
	sel, err := NewPolicySelector(Policy{Name: c.policyName, Limiter: l, Key: c.key})
	if err != nil {
		return nil, err
	}
	return newMiddleware(c, sel)
}

// NewPolicyMiddleware returns a middleware that limits each request by the
// policy sel selects for it (see PolicySelector); the selected policy's
// name appears in the quota headers. A request no policy applies to (every
// key function returned ErrNoKey) is answered 400 (see ErrorStatus). It
// takes the same options as NewMiddleware except WithKeyFunc and
// WithPolicyName; WithCost and WithCountStatus are checked against every
// policy's limiter.
func NewPolicyMiddleware(sel *PolicySelector, opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	if sel == nil {
		return nil, fmt.Errorf("%w: nil policy selector", ErrInvalidOption)
	}
	c, err := newMiddlewareConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.key != nil || c.policyName != "" {
		return nil, fmt.Errorf("%w: WithKeyFunc and WithPolicyName do not apply to a policy selector; set them on each Policy", ErrInvalidOption)
	}
	return newMiddleware(c, sel)
}

func newMiddlewareConfig(opts []MiddlewareOption) (middlewareConfig, error) {
	c := middlewareConfig{
		cost:    1,
		denied:  ProblemDetails,
		onError: FailClosed,
		headers: HeadersIETF,
		logKeys: DefaultLogKeys,
		now:     time.Now,
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
	if c.given["WithLogKeys"] && c.logger == nil {
		return c, fmt.Errorf("%w: WithLogKeys without WithLogger", ErrInvalidOption)
	}
	return c, nil
}

// checkPolicies refuses options that no request could satisfy with some
// policy's limiter: a fixed cost above its capacity, or counting by
// status on a limiter that cannot give a reservation back.
func checkPolicies(c *middlewareConfig, sel *PolicySelector) error {
	for _, p := range sel.policies {
		if c.costFunc == nil {
			if err := checkCapacity(p.Name, p.Limiter, c.cost); err != nil {
				return err
			}
		}
		if c.countStatus != nil {
			if _, ok := p.Limiter.(Refunder); !ok {
				return fmt.Errorf("policy %q: %w: WithCountStatus needs a limiter that implements Refunder, to give back the cost of a response that does not count", p.Name, ErrInvalidOption)
			}
		}
	}
	return nil
}

// middleware is the configured limiter shared by every handler it wraps.
type middleware struct {
	cfg     middlewareConfig
	sel     *PolicySelector
	denials *denialLog // nil without a logger
	// watch: a logger wants the configuration warnings on every request
	// (then paced by watchPeriod); a hook alone gets its EvictedLive
	// samples from one request in hookWatchOneIn.
	watch bool
	// forwardCheck is the Unix ns before which forwarding headers are not
	// looked at again.
	forwardCheck atomic.Int64

	logMu       sync.Mutex // guards the windows below
	errorLog    logWindow  // failures of the limiter
	clientLog   logWindow  // the client's own doing, hang-ups
	configLog   logWindow  // misconfigurations
	evictLog    logWindow  // live evictions
	evictedLive uint64     // live evictions not yet logged
}

func newMiddleware(c middlewareConfig, sel *PolicySelector) (func(http.Handler) http.Handler, error) {
	if err := checkPolicies(&c, sel); err != nil {
		return nil, err
	}
	m := &middleware{cfg: c, sel: sel, watch: c.logger != nil}
	if c.logger != nil {
		m.denials = newDenialLog(c.logKeys)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}, nil
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skipped(r) {
		next.ServeHTTP(w, r)
		return
	}
	p, key, err := m.sel.selectPolicy(r)
	if err != nil {
		m.fail(w, r, next, DecisionEvent{Request: r, Policy: p.Name, Err: err})
		return
	}
	cost := m.cfg.cost
	if m.cfg.costFunc != nil {
		if cost, err = m.cfg.costFunc(r); err == nil && cost < 0 {
			err = fmt.Errorf("%w: cost function returned %d", ErrInvalidCost, cost)
		}
		if err != nil {
			m.fail(w, r, next, DecisionEvent{Request: r, Policy: p.Name, Key: key, Err: err})
			return
		}
	}
	d, err := p.Limiter.AllowN(r.Context(), key, cost)
	var evicted uint64
	if m.watch || (m.cfg.hook != nil && rand.Uint32()%hookWatchOneIn == 0) {
		evicted = m.watchConfig(r, p, key)
	}
	m.decide(w, r, next, p, key, cost, d, err, evicted)
}

func (m *middleware) skipped(r *http.Request) bool {
	for _, skip := range m.cfg.skip {
		if skip(r) {
			return true
		}
	}
	for _, match := range m.cfg.only {
		if !match(r) {
			return true
		}
	}
	return false
}

// decide acts on the limiter's answer: headers, then the handler or the
// denied response.
func (m *middleware) decide(w http.ResponseWriter, r *http.Request, next http.Handler, p *policy, key string, cost int, d Decision, err error, evicted uint64) {
	costExceeded := false
	if err != nil {
		if !errors.Is(err, ErrCostExceedsLimit) {
			m.fail(w, r, next, DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: d, Err: err, EvictedLive: evicted})
			return
		}
		// A denial, but one that waiting does not cure: no Retry-After.
		costExceeded = true
		d.Allowed, d.RetryAfter = false, 0
	}
	blocked := !d.Allowed && !m.cfg.dryRun
	q := p.headers(m.cfg.headers, d, blocked && !costExceeded, costExceeded, m.cfg.now)
	q.write(w.Header())
	if !d.Allowed && m.denials != nil {
		m.logDenial(r, p, key, d)
	}
	if m.cfg.hook != nil {
		m.cfg.hook(DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: d, Err: err, Blocked: blocked, EvictedLive: evicted})
	}
	switch {
	case blocked:
		m.cfg.denied(w, r, d)
	case m.cfg.countStatus != nil && d.Allowed && cost > 0:
		m.serveCounted(w, r, next, p, key, cost)
	default:
		next.ServeHTTP(w, r)
	}
}

// serveCounted runs the handler of a request whose cost is reserved, and
// gives the cost back if the response status does not count.
func (m *middleware) serveCounted(w http.ResponseWriter, r *http.Request, next http.Handler, p *policy, key string, cost int) {
	sw := &statusWriter{ResponseWriter: w}
	// A panic (http.ErrAbortHandler too) goes up from here and skips the
	// refund: whatever the handler did before it counts.
	next.ServeHTTP(sw, r)
	if m.cfg.countStatus(sw.statusCode()) {
		return
	}
	// The client may have gone by now; the refund is owed all the same.
	// checkPolicies made sure the limiter can refund.
	err := p.Limiter.(Refunder).RefundN(context.WithoutCancel(r.Context()), key, cost)
	if err != nil {
		m.logError(r, p.Name, err)
	}
	if m.cfg.hook != nil {
		m.cfg.hook(DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Err: err, AfterHandler: true})
	}
}

// fail answers a request on which no decision could be made. Only a
// failure of the limiter is the error policy's to decide; the client's own
// doing, a misconfiguration and a client that went away are answered the
// same under every policy (dry-run aside, which lets everything through
// but the last).
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, ev DecisionEvent) {
	if ctxErr := r.Context().Err(); ctxErr != nil {
		// The client went away, and the limiter most likely failed
		// because of it: that is no outage, and nobody is left to serve.
		ev.Err = fmt.Errorf("floodgate: the client went away during the decision: %w; %w", ctxErr, ev.Err)
		ev.Blocked = true
		m.logClient(r, ev.Policy, StatusClientClosedRequest, ev.Err)
		if m.cfg.hook != nil {
			m.cfg.hook(ev)
		}
		w.WriteHeader(StatusClientClosedRequest)
		return
	}
	status := ErrorStatus(ev.Err)
	open := m.cfg.dryRun || (m.cfg.failOpen && status == http.StatusServiceUnavailable)
	ev.Blocked = !open
	switch status {
	case http.StatusServiceUnavailable:
		m.logError(r, ev.Policy, ev.Err)
	case http.StatusInternalServerError:
		m.logMisconfig(r, ev.Policy, ev.Err)
	default:
		m.logClient(r, ev.Policy, status, ev.Err)
	}
	if m.cfg.hook != nil {
		m.cfg.hook(ev)
	}
	if open {
		next.ServeHTTP(w, r)
		return
	}
	m.cfg.onError(w, r, ev.Err) // FailClosed under WithFailOpen
}

// watchConfig looks, at most once a second, for the signs of a
// configuration that does not fit the traffic, and logs them. It returns
// the live evictions its sample of p's limiter found.
func (m *middleware) watchConfig(r *http.Request, p *policy, key string) uint64 {
	now := m.cfg.now().UnixNano()
	if m.cfg.logger != nil {
		m.checkForwarding(r, p, key, now)
	}
	n := p.evictions.sample(now)
	if n > 0 && m.cfg.logger != nil {
		m.logEvictions(r, p, n)
	}
	return n
}

// checkForwarding warns when a private or loopback peer (a proxy, most
// likely) sends forwarding headers and the key is that peer's own
// address: the headers were not trusted, so every client behind the proxy
// shares its limit.
func (m *middleware) checkForwarding(r *http.Request, p *policy, key string, now int64) {
	next := m.forwardCheck.Load()
	if now < next || !m.forwardCheck.CompareAndSwap(next, now+int64(watchPeriod)) {
		return
	}
	h := r.Header
	if len(h["X-Forwarded-For"]) == 0 && len(h["X-Real-Ip"]) == 0 && len(h["Forwarded"]) == 0 {
		return
	}
	peer, ok := peerAddr(r.RemoteAddr)
	if !ok || !(peer.IsPrivate() || peer.IsLoopback()) || !keyIsAddr(key, peer) {
		return
	}
	m.forwardCheck.Store(now + int64(configLogPeriod))
	m.cfg.logger.LogAttrs(r.Context(), slog.LevelWarn,
		"floodgate: a private or loopback peer sends forwarding headers that the key function does not trust, so every client behind it shares one limit; if it is your proxy, configure KeyByIP with TrustProxies and the header it sets",
		slog.String("policy", p.Name),
		slog.String("peer", peer.String()),
		slog.String("key", key))
}

// peerAddr parses RemoteAddr, with or without a port.
func peerAddr(remote string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// keyIsAddr reports whether key is peer's address, or the prefix KeyByIP
// groups it in.
func keyIsAddr(key string, peer netip.Addr) bool {
	if a, err := netip.ParseAddr(key); err == nil {
		return a.Unmap() == peer
	}
	if pfx, err := netip.ParsePrefix(key); err == nil {
		return pfx.Contains(peer)
	}
	return false
}

func (m *middleware) logDenial(r *http.Request, p *policy, key string, d Decision) {
	now := m.cfg.now()
	ok, suppressed, other := m.denials.admit(key, now, d.ResetAfter)
	if !ok {
		return
	}
	m.cfg.logger.LogAttrs(r.Context(), slog.LevelWarn, "rate limit exceeded",
		slog.String("policy", p.Name),
		slog.String("key", key),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("retry_after", d.RetryAfter.Round(time.Millisecond).String()),
		slog.Bool("dry_run", m.cfg.dryRun),
		slog.Uint64("suppressed", suppressed),
		slog.Uint64("suppressed_other", other))
}

// admit paces the lines of one window.
func (m *middleware) admit(w *logWindow, period time.Duration) (bool, uint64) {
	now := m.cfg.now()
	m.logMu.Lock()
	defer m.logMu.Unlock()
	return w.admit(now, period)
}

func (m *middleware) logError(r *http.Request, policy string, err error) {
	if m.cfg.logger == nil {
		return
	}
	ok, suppressed := m.admit(&m.errorLog, errorLogPeriod)
	if !ok {
		return
	}
	m.cfg.logger.LogAttrs(r.Context(), slog.LevelError, "rate limiter could not decide",
		slog.String("policy", policy),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("error", err.Error()),
		slog.Bool("fail_open", m.cfg.failOpen || m.cfg.dryRun),
		slog.Uint64("suppressed", suppressed))
}

// logClient logs a request refused for its own doing, or whose client
// went away, at DEBUG: an attacker can produce them at will.
func (m *middleware) logClient(r *http.Request, policy string, status int, err error) {
	l := m.cfg.logger
	if l == nil || !l.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	ok, suppressed := m.admit(&m.clientLog, errorLogPeriod)
	if !ok {
		return
	}
	msg := "rate limiter refused a request for the client's own doing"
	if status == StatusClientClosedRequest {
		msg = "client went away during the rate limit decision"
	}
	l.LogAttrs(r.Context(), slog.LevelDebug, msg,
		slog.String("policy", policy),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.String("error", err.Error()),
		slog.Uint64("suppressed", suppressed))
}

// logMisconfig logs an error that the server's configuration causes,
// with slog.Default when no logger is set: it refuses every request it
// touches, so it must be seen.
func (m *middleware) logMisconfig(r *http.Request, policy string, err error) {
	ok, suppressed := m.admit(&m.configLog, configLogPeriod)
	if !ok {
		return
	}
	l := m.cfg.logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(r.Context(), slog.LevelError, "floodgate: the rate limit is misconfigured; requests it applies to are refused with 500 until it is fixed",
		slog.String("policy", policy),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("error", err.Error()),
		slog.Uint64("suppressed", suppressed))
}

// logEvictions reports n more live limits evicted from p's limiter.
func (m *middleware) logEvictions(r *http.Request, p *policy, n uint64) {
	now := m.cfg.now()
	m.logMu.Lock()
	m.evictedLive += n
	ok, _ := m.evictLog.admit(now, configLogPeriod)
	n, m.evictedLive = m.evictedLive, 0
	if !ok {
		m.evictedLive = n
	}
	m.logMu.Unlock()
	if !ok {
		return
	}
	m.cfg.logger.LogAttrs(r.Context(), slog.LevelWarn,
		"floodgate: the limiter's store evicted live limits (their debt is kept, and may limit fresh keys that share its slot; under WithForgetEvicted each reset a client's limit): the store is too small for its keys (raise WithMaxKeys) or someone is spraying keys",
		slog.String("policy", p.Name),
		slog.Uint64("evicted_live", n))
}

// logWindow paces the lines about one subject: none before until, and a
// count of those held back.
type logWindow struct {
	until      time.Time
	suppressed uint64
}

// admit reports whether a line may be written at now, and how many were
// suppressed since the last one; it then holds lines back for period.
func (w *logWindow) admit(now time.Time, period time.Duration) (bool, uint64) {
	if now.Before(w.until) {
		w.suppressed++
		return false, 0
	}
	n := w.suppressed
	w.until, w.suppressed = now.Add(period), 0
	return true, n
}

// denialLog remembers, for a bounded number of keys, when each may be
// logged again.
type denialLog struct {
	mu   sync.Mutex
	size int
	keys *simplelru.LRU[string, *logWindow]
	// other counts denials neither logged nor counted under their key:
	// those of new keys while the table was full of keys still in their
	// windows, and the suppressed counts of expired keys dropped to make
	// room.
	other uint64
}

// minLogPeriod is the shortest time between two lines for one key.
const minLogPeriod = time.Second

func newDenialLog(size int) *denialLog {
	lru, _ := simplelru.NewLRU[string, *logWindow](size, nil) // size > 0: cannot fail
	return &denialLog{size: size, keys: lru}
}

// admit reports whether a denial of key at now may be logged, with the
// counts to report; a logged key is then quiet for period.
func (l *denialLog) admit(key string, now time.Time, period time.Duration) (ok bool, suppressed, other uint64) {
	if period < minLogPeriod {
		period = minLogPeriod
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, found := l.keys.Get(key); found {
		if ok, suppressed = w.admit(now, period); ok {
			other, l.other = l.other, 0
		}
		return ok, suppressed, other
	}
	if l.keys.Len() >= l.size {
		_, oldest, _ := l.keys.GetOldest()
		if now.Before(oldest.until) {
			// Every remembered key is within its window: the table is as
			// big as the log may grow in one period. Count, do not log.
			l.other++
			return false, 0, 0
		}
		l.other += oldest.suppressed
		l.keys.RemoveOldest()
	}
	// Clone: the key may point into request memory (a header value).
	l.keys.Add(strings.Clone(key), &logWindow{until: now.Add(period)})
	other, l.other = l.other, 0
	return true, 0, other
}

// statusWriter records the status of a response for WithCountStatus. It
// forwards Flush, Hijack and ReadFrom, and Unwrap lets
// http.ResponseController reach the other optional methods (deadlines,
// full duplex) of the writer below.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses other than 101 are interim; the final status follows.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher; it does nothing if the wrapped writer
// cannot flush.
func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError flushes, reporting an error if the wrapped writer cannot;
// http.ResponseController prefers it to Flush.
func (w *statusWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker by hijacking the wrapped writer's
// connection, if it can be.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

// ReadFrom implements io.ReaderFrom, so that io.Copy to the response
// keeps the wrapped writer's fast path (sendfile for a *os.File).
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(w.ResponseWriter, src)
}

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return w.status
}
