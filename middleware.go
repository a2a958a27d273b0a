package floodgate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
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
// fails every request): at most one line per period, with a count of the
// lines suppressed in between.
const errorLogPeriod = time.Second

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
// proxy, pass a KeyByIP configured with the proxy's address. A key error,
// ErrNoKey included, goes to the error policy (see WithFailOpen). It cannot be
// used with NewPolicyMiddleware, whose policies carry their key functions.
func WithKeyFunc(f KeyFunc) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil key function", ErrInvalidOption)
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
// positive: a request that cost nothing would never be limited.
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

// WithFailOpen lets a request through when no decision can be made (the
// key function, the cost function or the limiter failed), after logging
// the error. The default is to fail closed (FailClosed: 503), because the
// limiter is a security control: failing open hands an attacker who can
// make it fail (an unparseable address, a store overloaded on purpose) an
// unlimited endpoint. Choose fail-open where availability matters more
// than the limit, and watch the error log or the decision hook.
// ErrCostExceedsLimit is never an error here: it is a denial.
func WithFailOpen() MiddlewareOption {
	return func(c *middlewareConfig) error {
		c.failOpen = true
		return c.once("error policy")
	}
}

// WithErrorHandler answers requests on which no decision can be made with
// h instead of FailClosed; h sees the error, and may delegate to
// FailClosed for the cases it does not handle. The handler being limited
// is not called. It conflicts with WithFailOpen and WithDryRun.
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

// WithLogger logs each denial at WARN (message "rate limit exceeded", with
// the policy, key, method, path and retry delay), and each failure to
// decide at ERROR. The default is not to log: a library should not write to
// a program's output unasked.
//
// A flood does not flood the log: after a line for a key, further denials
// of that key are counted, not logged, until its reset period
// (Decision.ResetAfter, at least a second) has passed; the next line
// reports them as "suppressed". The keys remembered for this are bounded
// (WithLogKeys); when all of them are still within their periods, denials
// of new keys are dropped and reported as "suppressed_other" on the next
// line written. Errors are logged at most once a second, with the same
// kind of count.
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
	// Policy is the name of the policy that decided; empty if none could
	// be selected.
	Policy string
	// Key is the key the request was counted under; empty if none could
	// be formed.
	Key string
	// Cost is the number of units asked for.
	Cost int
	// Decision is the limiter's decision. With WithCountStatus, the first
	// event of an allowed request reports the check made before the
	// handler ran (nothing consumed).
	Decision Decision
	// Err is non-nil when no decision could be made (the error policy then
	// applied) and is ErrCostExceedsLimit when the request can never be
	// allowed.
	Err error
	// Blocked reports that the request was refused and the handler not
	// called: a denial outside dry-run, or an error without fail-open.
	Blocked bool
	// AfterHandler marks the second event of a request under
	// WithCountStatus: its cost was consumed after the handler returned a
	// status that counts.
	AfterHandler bool
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
// be made. Use it to try a new limit on live traffic. It conflicts with
// WithErrorHandler.
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
// Before the handler runs, the middleware checks without consuming that
// the quota still holds the request's cost, and denies it otherwise (the
// handler is not called). After the handler returns, it consumes the cost
// if the status counts. The check and the consumption are two steps, so
// concurrent requests can all pass the check; the quota then ends up
// exhausted, as if they had come one by one, but may briefly be exceeded
// by as many requests as were in flight. The quota headers show the state
// before the request. The handler sees a wrapped ResponseWriter that keeps
// http.Flusher, http.Hijacker and http.ResponseController working
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
				writeProblem(w, http.StatusInternalServerError, "Internal Server Error",
					"The rate limiter is misconfigured.")
			})
		}
	}
	return mw
}

// NewMiddleware is Middleware that reports an invalid configuration (a nil
// limiter, an invalid, repeated or conflicting option) as an error wrapping
// ErrInvalidOption.
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
	return newMiddleware(c, sel), nil
}

// NewPolicyMiddleware returns a middleware that limits each request by the
// policy sel selects for it (see PolicySelector); the selected policy's
// name appears in the quota headers. A request no policy applies to (every
// key function returned ErrNoKey) goes to the error policy. It takes the
// same options as NewMiddleware except WithKeyFunc and WithPolicyName.
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
	return newMiddleware(c, sel), nil
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

// middleware is the configured limiter shared by every handler it wraps.
type middleware struct {
	cfg      middlewareConfig
	sel      *PolicySelector
	denials  *denialLog // nil without a logger
	errorLog logWindow
	errorMu  sync.Mutex
}

func newMiddleware(c middlewareConfig, sel *PolicySelector) func(http.Handler) http.Handler {
	m := &middleware{cfg: c, sel: sel}
	if c.logger != nil {
		m.denials = newDenialLog(c.logKeys)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skipped(r) {
		next.ServeHTTP(w, r)
		return
	}
	p, key, err := m.sel.selectPolicy(r)
	if err != nil {
		m.fail(w, r, next, DecisionEvent{Request: r, Err: err})
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
	if m.cfg.countStatus != nil {
		m.serveCounting(w, r, next, p, key, cost)
		return
	}
	d, err := p.Limiter.AllowN(r.Context(), key, cost)
	m.decide(w, r, next, p, key, cost, d, err)
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
func (m *middleware) decide(w http.ResponseWriter, r *http.Request, next http.Handler, p *policy, key string, cost int, d Decision, err error) {
	costExceeded := false
	if err != nil {
		if !errors.Is(err, ErrCostExceedsLimit) {
			m.fail(w, r, next, DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: d, Err: err})
			return
		}
		// A denial, but one that waiting does not cure: no Retry-After.
		costExceeded = true
		d.Allowed, d.RetryAfter = false, 0
	}
	blocked := !d.Allowed && !m.cfg.dryRun
	setQuotaHeaders(w.Header(), m.cfg.headers, p, d, blocked && !costExceeded, costExceeded, m.cfg.now)
	if !d.Allowed && m.denials != nil {
		m.logDenial(r, p, key, d)
	}
	if m.cfg.hook != nil {
		m.cfg.hook(DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: d, Err: err, Blocked: blocked})
	}
	if !blocked {
		next.ServeHTTP(w, r)
		return
	}
	m.cfg.denied(w, r, d)
}

// serveCounting checks the quota without consuming, runs the handler, and
// consumes only if the response status counts.
func (m *middleware) serveCounting(w http.ResponseWriter, r *http.Request, next http.Handler, p *policy, key string, cost int) {
	peek, err := p.Limiter.AllowN(r.Context(), key, 0)
	if err != nil {
		m.fail(w, r, next, DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: peek, Err: err})
		return
	}
	if peek.Remaining < cost {
		// No room if this request counts: ask for the cost itself to get
		// the exact RetryAfter. If the quota refilled in the meantime the
		// request is allowed and has been counted up front, whatever its
		// status turns out to be.
		d, err := p.Limiter.AllowN(r.Context(), key, cost)
		m.decide(w, r, next, p, key, cost, d, err)
		return
	}
	setQuotaHeaders(w.Header(), m.cfg.headers, p, peek, false, false, m.cfg.now)
	if m.cfg.hook != nil {
		m.cfg.hook(DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: peek})
	}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if !m.cfg.countStatus(sw.statusCode()) {
		return
	}
	// The client may have gone by now; its request must count all the
	// same, or hanging up would be a way around the limit.
	d, err := p.Limiter.AllowN(context.WithoutCancel(r.Context()), key, cost)
	if err != nil && !errors.Is(err, ErrCostExceedsLimit) {
		m.logError(r, p.Name, err)
	}
	if m.cfg.hook != nil {
		m.cfg.hook(DecisionEvent{Request: r, Policy: p.Name, Key: key, Cost: cost, Decision: d, Err: err, AfterHandler: true})
	}
}

// fail applies the error policy to a request on which no decision could be
// made.
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, ev DecisionEvent) {
	open := m.cfg.failOpen || m.cfg.dryRun
	ev.Blocked = !open
	m.logError(r, ev.Policy, ev.Err)
	if m.cfg.hook != nil {
		m.cfg.hook(ev)
	}
	if open {
		next.ServeHTTP(w, r)
		return
	}
	m.cfg.onError(w, r, ev.Err)
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

func (m *middleware) logError(r *http.Request, policy string, err error) {
	if m.cfg.logger == nil {
		return
	}
	now := m.cfg.now()
	m.errorMu.Lock()
	ok, suppressed := m.errorLog.admit(now, errorLogPeriod)
	m.errorMu.Unlock()
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
// forwards Flush and Hijack, and Unwrap lets http.ResponseController reach
// the other optional methods (deadlines, full duplex) of the writer below.
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

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return w.status
}
