package floodgate

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
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
// refund, WithRefundUncounted, which is for adapters over a Gate) as an
// error wrapping ErrInvalidOption.
func NewMiddleware(l Limiter, opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	c, err := newMiddlewareConfig(opts)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: nil limiter", ErrInvalidOption)
	}
	switch {
	case c.key == nil && keyless(l): // a service-wide limit: nothing to key
		c.key = serviceKey
	case c.key == nil:
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
	return newMiddleware(c, sel.sel)
}

// keyless reports whether l ignores the key, so that a middleware over it
// keys nothing by default.
func keyless(l Limiter) bool {
	sw, ok := l.(serviceWider)
	return ok && sw.ServiceWide()
}

// serviceKey is the key function of a limit that ignores the key.
func serviceKey(*http.Request) (string, error) { return "", nil }

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
	return newMiddleware(c, sel.sel)
}

// middleware is the net/http adapter over the admission core, shared by
// every handler it wraps: it keys and prices a request, hands the Call to
// its Gate, and answers the Outcome in HTTP.
type middleware struct {
	cfg  middlewareConfig
	sel  *SelectorFor[*http.Request]
	gate *Gate
	// exempting: WithSkip or WithOnly was given (saves a call per request
	// when neither was).
	exempting bool
	// forwardCheck is the Unix ns before which forwarding headers are not
	// looked at again.
	forwardCheck atomic.Int64
}

func newMiddleware(c middlewareConfig, sel *SelectorFor[*http.Request]) (func(http.Handler) http.Handler, error) {
	if c.given["WithRefundUncounted"] {
		return nil, fmt.Errorf("%w: WithRefundUncounted is for adapters over a Gate; the middleware counts by status with WithCountStatus", ErrInvalidOption)
	}
	if c.given["WithSettledCost"] {
		return nil, fmt.Errorf("%w: WithSettledCost is for adapters over a Gate; the middleware charges the cost after the response with WithCostAfter", ErrInvalidOption)
	}
	gate, err := newGate(c.gateConfig, sel.policies)
	if err != nil {
		return nil, err
	}
	m := &middleware{cfg: c, sel: sel, gate: gate, exempting: len(c.skip) > 0 || len(c.only) > 0}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}, nil
}

// serve orders one request's way through the limit: exemptions, then the
// decision, then the answer.
func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.exempting && m.skipped(r) {
		next.ServeHTTP(w, r)
		return
	}
	var out Outcome
	m.call(r, &out.Call)
	// A CORS preflight is decided as a request, and given back if it is
	// answered as a preflight (preflight.go).
	out.Call.refundable = r.Method == http.MethodOptions && !m.cfg.preflights && isPreflight(r)
	m.gate.admit(r.Context(), &out)
	if m.cfg.logger != nil {
		m.checkForwarding(r, &out)
	}
	m.answer(w, r, next, &out)
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

// call keys and prices a request: the key first, since a cost function
// may read the body a key function has put back.
func (m *middleware) call(r *http.Request, c *Call) {
	i, key, err := m.sel.pick(r)
	c.Key, c.Err, c.policy = key, err, m.sel.policies[i]
	c.Request = r // Method and Path, for the log lines, come from it
	if err == nil && m.cfg.costFunc != nil {
		c.Cost, c.Err = m.cfg.costFunc(r)
		c.Free = c.Err == nil && c.Cost == 0
	}
}

// answer acts on the outcome in HTTP: the quota headers, then the
// handler, or the denied, error or hang-up response.
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, next http.Handler, out *Outcome) {
	if !out.Blocked {
		writeQuota(w.Header(), &out.Quota)
		if out.NeedsSettle {
			m.serveSettled(w, r, next, out)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	switch out.Kind {
	case OutcomeDenied: // 429, or 503 for Decision.Overloaded (see DeniedHandler)
		writeQuota(w.Header(), &out.Quota)
		m.cfg.denied(w, r, out.Decision)
	case OutcomeHungUp:
		w.WriteHeader(StatusClientClosedRequest) // nobody reads it; for the access log
	default:
		m.cfg.onError(w, r, out.Err) // FailClosed unless WithErrorHandler
	}
}

// serveSettled runs the handler of a request the gate settles after it
// (NeedsSettle), and settles it: when the handler returns, by the
// response it wrote (WithCountStatus, WithCostAfter, a CORS preflight
// given back if answered as one), or as counted if the handler panics —
// the panic goes on up, and whatever the handler did before it counts. A
// request that only holds in-flight slots needs nothing of the response.
func (m *middleware) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, out *Outcome) {
	if m.cfg.countStatus == nil && m.cfg.responseCost == nil && !out.Call.refundable {
		m.serveHeld(w, r, next, out)
		return
	}
	r = r.WithContext(out.Context(r.Context()))
	sw := &statusWriter{ResponseWriter: w, settling: settling{gate: m.gate, ctx: r.Context(), req: r, out: *out,
		counts: m.cfg.countStatus, cost: m.cfg.responseCost, preflight: out.Call.refundable}}
	returned := false
	defer func() {
		if !returned {
			sw.settle(Result{Panicked: true})
		}
	}()
	next.ServeHTTP(sw, r)
	returned = true
	if !sw.deferred {
		sw.settleStatus(sw.statusCode())
	}
}

// serveHeld runs the handler of a request holding in-flight slots, and
// releases them when it returns or panics.
func (m *middleware) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, out *Outcome) {
	returned := false
	defer func() { m.gate.Settle(r.Context(), *out, Result{Panicked: !returned}) }()
	next.ServeHTTP(w, r)
	returned = true
}
