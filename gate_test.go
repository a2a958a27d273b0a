package floodgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// call is the call type of the tests' imaginary transport.
type call struct {
	client string
	err    error
}

func callKey(c call) (string, error) {
	if c.err != nil {
		return "", c.err
	}
	return c.client, nil
}

func mustGate(t *testing.T, l Limiter, opts ...MiddlewareOption) (*Gate, *SelectorFor[call]) {
	t.Helper()
	sel, err := NewSelectorFor(PolicyFor[call]{Name: "client", Limiter: l, Key: callKey})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(sel, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g, sel
}

// quietLogger logs nowhere: the tests below provoke misconfigurations,
// which are logged with slog.Default otherwise.
func quietLogger() MiddlewareOption {
	return WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// NewGate takes the admission core's options and refuses those of the
// net/http middleware, which would do nothing there.
func TestNewGateRefusesMiddlewareOptions(t *testing.T) {
	sel, err := NewSelectorFor(PolicyFor[call]{Name: "client", Limiter: &fakeLimiter{}, Key: callKey})
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]MiddlewareOption{
		"WithKeyFunc":         WithKeyFunc(KeyByMethod()),
		"WithPolicyName":      WithPolicyName("x"),
		"WithCostFunc":        WithCostFunc(func(*http.Request) (int, error) { return 1, nil }),
		"WithSkip":            WithSkip(func(*http.Request) bool { return false }),
		"WithOnly":            WithOnly(func(*http.Request) bool { return true }),
		"WithDeniedHandler":   WithDeniedHandler(ProblemDetails),
		"WithErrorHandler":    WithErrorHandler(FailClosed),
		"WithCountStatus":     WithCountStatus(func(int) bool { return true }),
		"WithLimitPreflights": WithLimitPreflights(),
	} {
		if _, err := NewGate(sel, opt); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), name) {
			t.Errorf("NewGate with %s: %v, want ErrInvalidOption naming it", name, err)
		}
	}
	if _, err := NewGate[call](nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewGate(nil): %v", err)
	}
	if _, err := NewGate(sel, WithRefundUncounted()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithRefundUncounted on a limiter that cannot refund: %v", err)
	}
	if _, err := NewMiddleware(&fakeLimiter{}, WithRefundUncounted()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewMiddleware with WithRefundUncounted: %v", err)
	}
	if _, err := NewGate(sel, WithFailOpen(), WithDryRun(), WithHeaders(HeadersBoth), WithCost(2)); err != nil {
		t.Errorf("NewGate with core options: %v", err)
	}
}

// Every kind of outcome, under every error policy: what is blocked, what
// is reported, which quota values go with it.
func TestGateOutcomes(t *testing.T) {
	allow := Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}
	deny := Decision{Limit: 10, RetryAfter: 3 * time.Second, ResetAfter: 30 * time.Second}
	storeDown := errors.New("store: connection refused")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	type want struct {
		kind              OutcomeKind
		closed, open, dry bool // Blocked under fail-closed, fail-open, dry-run
		retry, rateLimit  bool // Quota.RetryAfter, Quota.RateLimit set (fail-closed)
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		lim  *fakeLimiter
		c    call
		cost int
		want want
	}{
		{"allowed", context.Background(), &fakeLimiter{d: allow}, call{client: "a"}, 0, want{OutcomeAllowed, false, false, false, false, true}},
		{"denied", context.Background(), &fakeLimiter{d: deny}, call{client: "a"}, 0, want{OutcomeDenied, true, true, false, true, true}},
		{"cost exceeds the limit", context.Background(), &fakeLimiter{d: deny, err: ErrCostExceedsLimit}, call{client: "a"}, 0, want{OutcomeDenied, true, true, false, false, false}},
		{"no key", context.Background(), &fakeLimiter{d: allow}, call{err: ErrNoKey}, 0, want{OutcomeClientError, true, true, false, false, false}},
		{"no client IP", context.Background(), &fakeLimiter{d: allow}, call{err: ErrNoClientIP}, 0, want{OutcomeClientError, true, true, false, false, false}},
		{"misconfigured key", context.Background(), &fakeLimiter{d: allow}, call{err: fmt.Errorf("%w: outside the mux", ErrInvalidOption)}, 0, want{OutcomeMisconfigured, true, true, false, false, false}},
		{"store down", context.Background(), &fakeLimiter{err: storeDown}, call{client: "a"}, 0, want{OutcomeFailed, true, false, false, false, false}},
		{"negative cost", context.Background(), &fakeLimiter{d: allow}, call{client: "a"}, -1, want{OutcomeMisconfigured, true, true, false, false, false}},
		{"key function's own error", context.Background(), &fakeLimiter{d: allow}, call{err: errors.New("session store: connection refused")}, 0, want{OutcomeKeyFailed, true, true, false, false, false}},
		{"key function's store error, wrapped", context.Background(), &fakeLimiter{d: allow}, call{err: fmt.Errorf("lookup: %w", storeDown)}, 0, want{OutcomeKeyFailed, true, true, false, false, false}},
		{"hung up", cancelled, &fakeLimiter{err: context.Canceled}, call{client: "a"}, 0, want{OutcomeHungUp, true, true, true, false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, pol := range []struct {
				name    string
				opt     MiddlewareOption
				blocked bool
			}{{"closed", WithHeaders(HeadersIETF), tt.want.closed}, {"open", WithFailOpen(), tt.want.open}, {"dry", WithDryRun(), tt.want.dry}} {
				var events []DecisionEvent
				g, sel := mustGate(t, tt.lim, pol.opt, quietLogger(),
					WithDecisionHook(func(ev DecisionEvent) { events = append(events, ev) }))
				c := sel.Call(tt.c)
				c.Cost = tt.cost
				out := g.Admit(tt.ctx, c)
				if out.Kind != tt.want.kind || out.Blocked != pol.blocked {
					t.Errorf("%s: kind %s, blocked %v; want %s, %v (err %v)", pol.name, out.Kind, out.Blocked, tt.want.kind, pol.blocked, out.Err)
				}
				if len(events) != 1 || events[0].Blocked != out.Blocked || events[0].Policy != "client" || !errors.Is(events[0].Err, out.Err) {
					t.Errorf("%s: events %+v for outcome %+v", pol.name, events, out)
				}
				if out.Call.Policy() != "client" {
					t.Errorf("%s: policy %q", pol.name, out.Call.Policy())
				}
				if pol.name != "closed" {
					continue
				}
				if got := out.Quota.RetryAfter() != nil; got != tt.want.retry {
					t.Errorf("Retry-After set %v, want %v", got, tt.want.retry)
				}
				if got := out.Quota.RateLimit() != nil; got != tt.want.rateLimit {
					t.Errorf("RateLimit set %v, want %v", got, tt.want.rateLimit)
				}
			}
		})
	}
}

// The cost of a call: the gate's when the adapter says nothing, nothing
// when it says Free, its own otherwise; a call no selector made is a
// misconfiguration, never a free pass.
func TestGateCost(t *testing.T) {
	lim := &fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 9}}
	g, sel := mustGate(t, lim, WithCost(3), quietLogger())
	for _, tt := range []struct {
		cost int
		free bool
		want int
	}{{0, false, 3}, {5, false, 5}, {0, true, 0}, {7, true, 0}} {
		c := sel.Call(call{client: "a"})
		c.Cost, c.Free = tt.cost, tt.free
		out := g.Admit(context.Background(), c)
		calls := lim.recorded()
		if out.Call.Cost != tt.want || calls[len(calls)-1].n != tt.want {
			t.Errorf("cost %d free %v: charged %d (limiter asked for %d), want %d", tt.cost, tt.free, out.Call.Cost, calls[len(calls)-1].n, tt.want)
		}
	}
	out := g.Admit(context.Background(), Call{Key: "a"})
	if out.Kind != OutcomeMisconfigured || !out.Blocked || len(lim.recorded()) != 4 {
		t.Errorf("a Call without a selector: %s, blocked %v, limiter asked %d times", out.Kind, out.Blocked, len(lim.recorded()))
	}
}

// Settle gives back the cost of a call that does not count, and nothing
// else: not for a call that counts, not after a panic, not for an
// outcome that needs no settling.
func TestGateSettle(t *testing.T) {
	b := mustTokenBucket(t, PerHour(2), WithClock(func() time.Time { return time.Unix(1e9, 0) }))
	var refunds int
	g, sel := mustGate(t, b, WithRefundUncounted(), WithDecisionHook(func(ev DecisionEvent) {
		if ev.AfterHandler {
			refunds++
		}
	}))
	admit := func() Outcome { return g.Admit(context.Background(), sel.Call(call{client: "a"})) }
	for i, res := range []Result{{Uncounted: true}, {Uncounted: true, Panicked: true}, {}} {
		out := admit()
		if out.Kind != OutcomeAllowed || !out.NeedsSettle {
			t.Fatalf("step %d: %s, needs settle %v", i, out.Kind, out.NeedsSettle)
		}
		g.Settle(context.Background(), out, res)
	}
	// One refunded, two counted: the quota of 2 is spent.
	if out := admit(); out.Kind != OutcomeDenied {
		t.Fatalf("after two counted calls: %s, want denied", out.Kind)
	}
	if refunds != 1 {
		t.Errorf("%d refund events, want 1", refunds)
	}
	out := admit()
	g.Settle(context.Background(), out, Result{Uncounted: true}) // denied: nothing to give back
	if out := admit(); out.Kind != OutcomeDenied || refunds != 1 {
		t.Errorf("settling a denial gave something back: %s, %d refunds", out.Kind, refunds)
	}
}

// A framework that takes the settlement over (DeferredSettler) settles
// with the status it sends, once; a panic counts, and a later settle
// does nothing.
func TestDeferredSettle(t *testing.T) {
	b := mustTokenBucket(t, PerHour(2), WithClock(func() time.Time { return time.Unix(1e9, 0) }))
	var settle func(int)
	mw := mustMiddleware(t, b, WithKeyFunc(headerKey("X-User")),
		WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		settle = w.(DeferredSettler).DeferSettle()
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
	}))
	do := func(path string) int {
		r := newRequest("POST", path, "192.0.2.1:1")
		r.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		func() {
			defer func() { _ = recover() }()
			h.ServeHTTP(w, r)
		}()
		return w.Code
	}
	// Deferred and settled with 200 later: given back, twice over.
	for range 3 {
		do("/login")
		settle(http.StatusOK)
		settle(http.StatusUnauthorized) // a second call does nothing
	}
	// Deferred, then a panic: counted, and the late settle does nothing.
	do("/panic")
	settle(http.StatusOK)
	do("/login") // deferred and never settled: counted
	if got := do("/login"); got != http.StatusTooManyRequests {
		t.Errorf("after a panic and an unsettled request: %d, want 429", got)
	}
}
