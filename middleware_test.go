package floodgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for limiters (WithClock) and the
// middleware (WithWallClock).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeLimiter answers every AllowN with a fixed decision and error, and
// records the calls.
type fakeLimiter struct {
	mu    sync.Mutex
	d     Decision
	err   error
	calls []fakeCall
}

type fakeCall struct {
	key string
	n   int
}

func (f *fakeLimiter) AllowN(_ context.Context, key string, n int) (Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{key, n})
	return f.d, f.err
}

func (f *fakeLimiter) recorded() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

// countingHandler counts its calls and answers with status.
type countingHandler struct {
	mu     sync.Mutex
	calls  int
	status int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	h.calls++
	status := h.status
	h.mu.Unlock()
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "handled")
}

func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

func newRequest(method, target, remote string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func mustMiddleware(t *testing.T, l Limiter, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := NewMiddleware(l, opts...)
	if err != nil {
		t.Fatalf("NewMiddleware: %v", err)
	}
	return mw
}

func mustTokenBucket(t *testing.T, r Rate, opts ...Option) *TokenBucket {
	t.Helper()
	tb, err := NewTokenBucket(r, opts...)
	if err != nil {
		t.Fatalf("NewTokenBucket: %v", err)
	}
	return tb
}

func TestNewMiddlewareRejectsBadOptions(t *testing.T) {
	lim := &fakeLimiter{}
	okKey := func(*http.Request) (string, error) { return "k", nil }
	tests := []struct {
		name string
		l    Limiter
		opts []MiddlewareOption
	}{
		{"nil limiter", nil, nil},
		{"nil option", lim, []MiddlewareOption{nil}},
		{"nil key func", lim, []MiddlewareOption{WithKeyFunc(nil)}},
		{"key func twice", lim, []MiddlewareOption{WithKeyFunc(okKey), WithKeyFunc(okKey)}},
		{"zero cost", lim, []MiddlewareOption{WithCost(0)}},
		{"negative cost", lim, []MiddlewareOption{WithCost(-1)}},
		{"cost and cost func", lim, []MiddlewareOption{WithCost(2), WithCostFunc(func(*http.Request) (int, error) { return 1, nil })}},
		{"nil cost func", lim, []MiddlewareOption{WithCostFunc(nil)}},
		{"nil skip", lim, []MiddlewareOption{WithSkip(nil)}},
		{"nil only", lim, []MiddlewareOption{WithOnly(nil)}},
		{"nil denied handler", lim, []MiddlewareOption{WithDeniedHandler(nil)}},
		{"nil error handler", lim, []MiddlewareOption{WithErrorHandler(nil)}},
		{"fail open and error handler", lim, []MiddlewareOption{WithFailOpen(), WithErrorHandler(FailClosed)}},
		{"dry run with error handler", lim, []MiddlewareOption{WithDryRun(), WithErrorHandler(FailClosed)}},
		{"unknown header style", lim, []MiddlewareOption{WithHeaders(HeaderStyle(42))}},
		{"negative header style", lim, []MiddlewareOption{WithHeaders(HeaderStyle(-1))}},
		{"empty policy name", lim, []MiddlewareOption{WithPolicyName("")}},
		{"non-ASCII policy name", lim, []MiddlewareOption{WithPolicyName("요청")}},
		{"control char in policy name", lim, []MiddlewareOption{WithPolicyName("a\nb")}},
		{"nil logger", lim, []MiddlewareOption{WithLogger(nil)}},
		{"log keys without logger", lim, []MiddlewareOption{WithLogKeys(10)}},
		{"zero log keys", lim, []MiddlewareOption{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithLogKeys(0)}},
		{"nil hook", lim, []MiddlewareOption{WithDecisionHook(nil)}},
		{"nil count predicate", lim, []MiddlewareOption{WithCountStatus(nil)}},
		{"nil wall clock", lim, []MiddlewareOption{WithWallClock(nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := NewMiddleware(tt.l, tt.opts...)
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
			if mw != nil {
				t.Fatal("got a middleware along with the error")
			}
		})
	}
}

// An invalid configuration given to Middleware refuses every request
// loudly instead of panicking or letting requests through unlimited.
func TestMiddlewareInvalidConfigRefusesRequests(t *testing.T) {
	next := &countingHandler{}
	h := Middleware(nil)(next)
	for i := 0; i < 3; i++ {
		w := serve(h, newRequest("GET", "/", "192.0.2.1:1000"))
		if w.Code != http.StatusInternalServerError {
			t.Fatalf("request %d: status %d, want 500", i, w.Code)
		}
		if ct := w.Header().Get("Content-Type"); ct != contentTypeProblem {
			t.Fatalf("Content-Type %q", ct)
		}
	}
	if next.count() != 0 {
		t.Fatalf("handler called %d times behind an invalid configuration", next.count())
	}
}

// A fixed timeline through a real token bucket (3 per minute): the
// headers, the denial, the refill.
func TestMiddlewareTimeline(t *testing.T) {
	clk := newFakeClock()
	tb := mustTokenBucket(t, PerMinute(3), WithClock(clk.Now))
	next := &countingHandler{}
	h := mustMiddleware(t, tb, WithPolicyName("api"))(next)
	steps := []struct {
		advance    time.Duration
		status     int
		rateLimit  string
		retryAfter string
	}{
		{0, 200, `"api";r=2;t=20`, ""},
		{0, 200, `"api";r=1;t=40`, ""},
		{0, 200, `"api";r=0;t=60`, ""},
		{0, 429, `"api";r=0;t=20`, "20"},
		{19500 * time.Millisecond, 429, `"api";r=0;t=1`, "1"},
		{500 * time.Millisecond, 200, `"api";r=0;t=60`, ""},
		{60 * time.Second, 200, `"api";r=2;t=20`, ""},
	}
	handled := 0
	for i, s := range steps {
		clk.Advance(s.advance)
		w := serve(h, newRequest("GET", "/x", "192.0.2.1:1000"))
		if w.Code != s.status {
			t.Fatalf("step %d: status %d, want %d", i, w.Code, s.status)
		}
		if s.status == 200 {
			handled++
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"api";q=3;w=60` {
			t.Errorf("step %d: RateLimit-Policy %q", i, got)
		}
		if got := w.Header().Get("RateLimit"); got != s.rateLimit {
			t.Errorf("step %d: RateLimit %q, want %q", i, got, s.rateLimit)
		}
		if got := w.Header().Get("Retry-After"); got != s.retryAfter {
			t.Errorf("step %d: Retry-After %q, want %q", i, got, s.retryAfter)
		}
		if next.count() != handled {
			t.Fatalf("step %d: handler called %d times, want %d (never for a denial)", i, next.count(), handled)
		}
	}
}

func TestMiddlewareSkipAndOnly(t *testing.T) {
	lim := &fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 9}}
	next := &countingHandler{}
	h := mustMiddleware(t, lim,
		WithOnly(MatchRoute(http.MethodGet, "/auth/available/user_id")),
		WithSkip(func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" }),
	)(next)
	tests := []struct {
		method, target string
		internal       bool
		limited        bool
	}{
		{"GET", "/auth/available/user_id?userId=a", false, true},
		{"GET", "/auth/available/user%5Fid?userId=a", false, true}, // decoded path
		{"POST", "/auth/available/user_id", false, false},
		{"GET", "/auth/available/user_id/", false, false},
		{"GET", "/healthz", false, false},
		{"GET", "/auth/available/user_id", true, false},
	}
	for _, tt := range tests {
		before := len(lim.recorded())
		r := newRequest(tt.method, tt.target, "192.0.2.1:1000")
		if tt.internal {
			r.Header.Set("X-Internal", "yes")
		}
		w := serve(h, r)
		limited := len(lim.recorded()) > before
		if limited != tt.limited {
			t.Errorf("%s %s internal=%v: limited %v, want %v", tt.method, tt.target, tt.internal, limited, tt.limited)
		}
		if hasHeader := w.Header().Get("RateLimit") != ""; hasHeader != tt.limited {
			t.Errorf("%s %s: RateLimit header present %v, want %v", tt.method, tt.target, hasHeader, tt.limited)
		}
	}
	if next.count() != len(tests) {
		t.Fatalf("handler called %d times, want %d", next.count(), len(tests))
	}
}

func TestMiddlewareCost(t *testing.T) {
	lim := &fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 5}}
	h := mustMiddleware(t, lim, WithCost(3), WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }))(&countingHandler{})
	serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	lim2 := &fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 5}}
	byItems := WithCostFunc(func(r *http.Request) (int, error) {
		switch r.URL.Query().Get("items") {
		case "2":
			return 2, nil
		case "0":
			return 0, nil
		case "-1":
			return -1, nil
		}
		return 0, errors.New("bad batch")
	})
	next := &countingHandler{}
	h2 := mustMiddleware(t, lim2, byItems)(next)
	codes := []int{
		serve(h2, newRequest("GET", "/?items=2", "192.0.2.1:1")).Code,
		serve(h2, newRequest("GET", "/?items=0", "192.0.2.1:1")).Code,
		serve(h2, newRequest("GET", "/?items=-1", "192.0.2.1:1")).Code,
		serve(h2, newRequest("GET", "/?items=x", "192.0.2.1:1")).Code,
	}
	if got := lim.recorded(); len(got) != 1 || got[0] != (fakeCall{"k", 3}) {
		t.Errorf("fixed cost: calls %v, want [{k 3}]", got)
	}
	want := []fakeCall{{"192.0.2.1", 2}, {"192.0.2.1", 0}}
	if got := lim2.recorded(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("cost func: calls %v, want %v", got, want)
	}
	if wantCodes := []int{200, 200, 500, 503}; !equalInts(codes, wantCodes) {
		t.Errorf("statuses %v, want %v", codes, wantCodes)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A cost above the capacity is a denial that waiting does not cure: 429
// without Retry-After, even with fail-open. (A fixed WithCost above it is
// refused at construction; a cost function can still ask for it.)
func TestMiddlewareCostExceedsLimitIsDenial(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		tb := mustTokenBucket(t, PerMinute(2))
		var events []DecisionEvent
		three := func(*http.Request) (int, error) { return 3, nil }
		opts := []MiddlewareOption{WithCostFunc(three), WithDecisionHook(func(e DecisionEvent) { events = append(events, e) })}
		if failOpen {
			opts = append(opts, WithFailOpen())
		}
		next := &countingHandler{}
		w := serve(mustMiddleware(t, tb, opts...)(next), newRequest("POST", "/", "192.0.2.1:1"))
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("failOpen=%v: status %d, want 429", failOpen, w.Code)
		}
		if next.count() != 0 {
			t.Fatalf("failOpen=%v: handler called", failOpen)
		}
		if ra := w.Header().Values("Retry-After"); len(ra) != 0 {
			t.Errorf("Retry-After %q for a request that can never succeed", ra)
		}
		if rl := w.Header().Values("RateLimit"); len(rl) != 0 {
			t.Errorf("RateLimit %q for a request that can never succeed", rl)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"default";q=2;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("body %q: %v", w.Body, err)
		}
		if _, ok := body["retryAfter"]; ok || body["status"] != float64(429) {
			t.Errorf("body %v: want status 429 and no retryAfter", body)
		}
		if len(events) != 1 || !errors.Is(events[0].Err, ErrCostExceedsLimit) || !events[0].Blocked {
			t.Errorf("events %+v: want one blocked ErrCostExceedsLimit", events)
		}
	}
}

func TestMiddlewareErrorPolicy(t *testing.T) {
	storeDown := errors.New("store down")
	badKey := func(*http.Request) (string, error) { return "", ErrNoClientIP }
	teapot := func(w http.ResponseWriter, _ *http.Request, err error) {
		if errors.Is(err, storeDown) || errors.Is(err, ErrNoClientIP) {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}
	tests := []struct {
		name    string
		keyErr  bool
		opts    []MiddlewareOption
		status  int
		handled bool
	}{
		{"limiter error, default fails closed", false, nil, 503, false},
		{"key error, default answers 400", true, nil, 400, false},
		{"limiter error, fail open", false, []MiddlewareOption{WithFailOpen()}, 200, true},
		{"key error, fail open still answers 400", true, []MiddlewareOption{WithFailOpen()}, 400, false},
		{"limiter error, custom handler", false, []MiddlewareOption{WithErrorHandler(teapot)}, 418, false},
		{"key error, custom handler", true, []MiddlewareOption{WithErrorHandler(teapot)}, 418, false},
		{"limiter error, dry run", false, []MiddlewareOption{WithDryRun()}, 200, true},
		{"key error, dry run", true, []MiddlewareOption{WithDryRun()}, 200, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := &fakeLimiter{err: storeDown}
			var logs bytes.Buffer
			var events []DecisionEvent
			opts := append([]MiddlewareOption{
				WithLogger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
				WithDecisionHook(func(e DecisionEvent) { events = append(events, e) }),
			}, tt.opts...)
			if tt.keyErr {
				opts = append(opts, WithKeyFunc(badKey))
			}
			next := &countingHandler{}
			w := serve(mustMiddleware(t, lim, opts...)(next), newRequest("GET", "/", "192.0.2.1:1"))
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			if (next.count() == 1) != tt.handled {
				t.Fatalf("handler called %d times, want handled=%v", next.count(), tt.handled)
			}
			if tt.status == 503 {
				var p map[string]any
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p["status"] != float64(503) {
					t.Errorf("503 body %q (%v)", w.Body, err)
				}
				if strings.Contains(w.Body.String(), "store down") {
					t.Error("503 body reveals the internal error")
				}
			}
			if len(events) != 1 || events[0].Err == nil || events[0].Blocked == tt.handled || events[0].Policy != DefaultPolicyName {
				t.Errorf("events %+v", events)
			}
			line := decodeLogLine(t, logs.Bytes())
			if tt.keyErr {
				// The client's doing: DEBUG, under the real policy name.
				if line["level"] != "DEBUG" || line["policy"] != DefaultPolicyName || line["status"] != float64(400) {
					t.Errorf("log line %v", line)
				}
			} else if line["level"] != "ERROR" || line["fail_open"] != tt.handled {
				t.Errorf("log line %v", line)
			}
		})
	}
}

func decodeLogLine(t *testing.T, b []byte) map[string]any {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) != 1 {
		t.Fatalf("want one log line, got %d: %s", len(lines), b)
	}
	var m map[string]any
	if err := json.Unmarshal(lines[0], &m); err != nil {
		t.Fatalf("log line %s: %v", lines[0], err)
	}
	return m
}

func TestMiddlewareDryRun(t *testing.T) {
	clk := newFakeClock()
	tb := mustTokenBucket(t, PerHour(1), WithClock(clk.Now))
	var logs bytes.Buffer
	var events []DecisionEvent
	next := &countingHandler{}
	h := mustMiddleware(t, tb, WithDryRun(), WithWallClock(clk.Now),
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		WithDecisionHook(func(e DecisionEvent) { events = append(events, e) }))(next)
	serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	w := serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	if w.Code != 200 || next.count() != 2 {
		t.Fatalf("status %d, handler calls %d: dry run must not block", w.Code, next.count())
	}
	if got := w.Header().Get("RateLimit"); got != `"default";r=0;t=3600` {
		t.Errorf("RateLimit %q: dry run still reports the decision", got)
	}
	if ra := w.Header().Values("Retry-After"); len(ra) != 0 {
		t.Errorf("Retry-After %q on a response that was not refused", ra)
	}
	if len(events) != 2 || !events[0].Decision.Allowed || events[1].Decision.Allowed || events[1].Blocked {
		t.Errorf("events %+v: want allowed, then denied but not blocked", events)
	}
	line := decodeLogLine(t, logs.Bytes())
	if line["level"] != "WARN" || line["dry_run"] != true || line["key"] != "192.0.2.1" {
		t.Errorf("log line %v", line)
	}
}

// Failed logins (401) count, successful ones do not (their reservation is
// given back); once the failures have used the quota, the handler is no
// longer called.
func TestMiddlewareCountStatus(t *testing.T) {
	clk := newFakeClock()
	tb := mustTokenBucket(t, PerMinute(3), WithClock(clk.Now))
	var events []DecisionEvent
	next := &countingHandler{}
	h := mustMiddleware(t, tb,
		WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized || s == http.StatusForbidden }),
		WithDecisionHook(func(e DecisionEvent) { events = append(events, e) }))(next)
	login := func(status int) *httptest.ResponseRecorder {
		next.mu.Lock()
		next.status = status
		next.mu.Unlock()
		return serve(h, newRequest("POST", "/login", "192.0.2.1:1"))
	}
	for i := 0; i < 5; i++ {
		// The headers show the reservation; it is given back afterwards.
		if w := login(200); w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=2;t=20` {
			t.Fatalf("success %d: status %d, RateLimit %q: successes must not count", i, w.Code, w.Header().Get("RateLimit"))
		}
	}
	wantRemaining := []string{`"default";r=2;t=20`, `"default";r=1;t=40`, `"default";r=0;t=60`}
	for i, want := range wantRemaining {
		if w := login(401); w.Code != 401 || w.Header().Get("RateLimit") != want {
			t.Fatalf("failure %d: status %d, RateLimit %q, want %q", i, w.Code, w.Header().Get("RateLimit"), want)
		}
	}
	calls := next.count()
	w := login(401)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "20" {
		t.Fatalf("after 3 failures: status %d, Retry-After %q; want 429, 20", w.Code, w.Header().Get("Retry-After"))
	}
	if next.count() != calls {
		t.Fatal("handler called for a denied request")
	}
	// A success is refused too while the quota is spent: the check comes
	// before the handler.
	if w := login(200); w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	clk.Advance(20 * time.Second)
	if w := login(200); w.Code != 200 {
		t.Fatalf("after a refill: status %d, want 200", w.Code)
	}
	var after int
	for _, e := range events {
		if e.AfterHandler {
			after++
			if e.Err != nil || e.Cost != 1 {
				t.Errorf("after-handler event: %+v", e)
			}
		}
	}
	if after != 6 {
		t.Errorf("%d after-handler events, want 6 (one per refunded success)", after)
	}
}

// The denial log writes one line per key per reset period, counts the
// rest, and bounds the keys it remembers.
func TestMiddlewareLogSuppression(t *testing.T) {
	clk := newFakeClock()
	tb := mustTokenBucket(t, PerMinute(1), WithClock(clk.Now))
	var logs bytes.Buffer
	h := mustMiddleware(t, tb, WithWallClock(clk.Now), WithLogKeys(2),
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))(&countingHandler{})
	hit := func(ip string, n int) {
		for i := 0; i < n; i++ {
			serve(h, newRequest("GET", "/p", ip+":1"))
		}
	}
	lines := func() []map[string]any {
		var out []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("log line %s: %v", l, err)
			}
			out = append(out, m)
		}
		logs.Reset()
		return out
	}
	hit("192.0.2.1", 101) // 1 allowed, 100 denied
	got := lines()
	if len(got) != 1 || got[0]["key"] != "192.0.2.1" || got[0]["method"] != "GET" || got[0]["path"] != "/p" || got[0]["msg"] != "rate limit exceeded" {
		t.Fatalf("after a flood from one key: %v, want one line", got)
	}
	hit("192.0.2.2", 3) // second key: one line
	hit("192.0.2.3", 3) // third key while both others are quiet: dropped, counted
	if got := lines(); len(got) != 1 || got[0]["key"] != "192.0.2.2" {
		t.Fatalf("keys 2 and 3: %v, want only key 2 (the table holds 2 keys)", got)
	}
	clk.Advance(30 * time.Second) // within the reset period (ResetAfter 60 s)
	hit("192.0.2.1", 5)
	if got := lines(); len(got) != 0 {
		t.Fatalf("within the period: %v, want no line", got)
	}
	clk.Advance(31 * time.Second) // key 1's window is over; the bucket refilled
	hit("192.0.2.1", 2)           // 1 allowed, 1 denied
	got = lines()
	if len(got) != 1 || got[0]["suppressed"] != float64(99+5) || got[0]["suppressed_other"] != float64(2) {
		t.Fatalf("after the period: %v, want one line with suppressed=104 suppressed_other=2", got)
	}
}

// The wrapped ResponseWriter of WithCountStatus keeps Flusher, Hijacker and
// ResponseController working.
func TestCountStatusWriterPassThrough(t *testing.T) {
	tb := mustTokenBucket(t, PerMinute(10))
	mw := mustMiddleware(t, tb, WithCountStatus(func(s int) bool { return s >= 400 }))

	t.Run("flush", func(t *testing.T) {
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			f, ok := w.(http.Flusher)
			if !ok {
				t.Error("not an http.Flusher")
				return
			}
			_, _ = io.WriteString(w, "part")
			f.Flush()
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, newRequest("GET", "/", "192.0.2.9:1"))
		if !w.Flushed || w.Body.String() != "part" {
			t.Fatalf("flushed %v, body %q", w.Flushed, w.Body)
		}
	})

	t.Run("hijack and deadlines on a real server", func(t *testing.T) {
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Errorf("SetWriteDeadline through the wrapper: %v", err)
			}
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("not an http.Hijacker")
				return
			}
			conn, rw, err := hj.Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer func() { _ = conn.Close() }()
			_, _ = rw.WriteString("HTTP/1.1 418 I'm a teapot\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = rw.Flush()
		})))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot {
			t.Fatalf("status %d, want the hijacker's 418", resp.StatusCode)
		}
	})

	t.Run("unsupported hijack reports an error", func(t *testing.T) {
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if _, _, err := w.(http.Hijacker).Hijack(); !errors.Is(err, http.ErrNotSupported) {
				t.Errorf("Hijack on a recorder: %v, want ErrNotSupported", err)
			}
			w.WriteHeader(204)
		}))
		if w := serve(h, newRequest("GET", "/", "192.0.2.9:1")); w.Code != 204 {
			t.Fatalf("status %d", w.Code)
		}
	})
}

func TestStatusWriterRecordsFinalStatus(t *testing.T) {
	tests := []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"nothing written", func(http.ResponseWriter) {}, 200},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200},
		{"explicit", func(w http.ResponseWriter) { w.WriteHeader(401) }, 401},
		{"interim then final", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(403) }, 403},
		{"second WriteHeader ignored", func(w http.ResponseWriter) { w.WriteHeader(401); w.WriteHeader(500) }, 401},
	}
	for _, tt := range tests {
		sw := &statusWriter{ResponseWriter: httptest.NewRecorder()}
		tt.write(sw)
		if got := sw.statusCode(); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	rec := httptest.NewRecorder()
	if sw := (&statusWriter{ResponseWriter: rec}); sw.Unwrap() != rec {
		t.Error("Unwrap does not return the wrapped writer")
	}
}
