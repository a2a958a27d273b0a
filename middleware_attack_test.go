package floodgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The attacks of issue 10 against the middleware, each written as a test
// first and checked to fail on the code before its fix.

// ctxLimiter fails as a network store does when the caller's context is
// done: with an error of its own that may or may not wrap the context's.
type ctxLimiter struct {
	wrap  bool // wrap ctx.Err(), or say something unrelated
	calls atomic.Int32
}

func (l *ctxLimiter) AllowN(ctx context.Context, _ string, _ int) (Decision, error) {
	l.calls.Add(1)
	if err := ctx.Err(); err != nil {
		if l.wrap {
			return Decision{}, fmt.Errorf("store: %w", err)
		}
		return Decision{}, errors.New("store: connection reset by peer")
	}
	return Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
}

func cancelledRequest() *http.Request {
	r := newRequest("POST", "/transfer", "192.0.2.1:1")
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	return r.WithContext(ctx)
}

// A client that hangs up during the decision is not an outage: under no
// error policy does its request reach the handler (a handler that ignores
// its context would act on it unlimited), and nothing blames the limiter
// with a 503. Detected by the request's context, not the error's text.
func TestMiddlewareClientGoneNeverReachesHandler(t *testing.T) {
	teapot := func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusTeapot) }
	policies := []struct {
		name string
		opts []MiddlewareOption
	}{
		{"fail closed", nil},
		{"fail open", []MiddlewareOption{WithFailOpen()}},
		{"error handler", []MiddlewareOption{WithErrorHandler(teapot)}},
		{"dry run", []MiddlewareOption{WithDryRun()}},
	}
	for _, pol := range policies {
		for _, wrap := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/wrapped=%v", pol.name, wrap), func(t *testing.T) {
				lim := &ctxLimiter{wrap: wrap}
				var events []DecisionEvent
				opts := append([]MiddlewareOption{WithDecisionHook(func(e DecisionEvent) { events = append(events, e) })}, pol.opts...)
				next := &countingHandler{}
				w := serve(mustMiddleware(t, lim, opts...)(next), cancelledRequest())
				if next.count() != 0 {
					t.Fatal("the handler ran for a client that went away")
				}
				if w.Code != 499 || w.Body.Len() != 0 {
					t.Errorf("status %d, body %q; want 499 and no body", w.Code, w.Body)
				}
				if len(events) != 1 || !events[0].Blocked || !errors.Is(events[0].Err, context.Canceled) {
					t.Errorf("events %+v: want one blocked event wrapping context.Canceled", events)
				}
			})
		}
	}
	// The same client, still there: fail-open lets a failing store's
	// request through as before.
	lim := &fakeLimiter{err: errors.New("store down")}
	next := &countingHandler{}
	if w := serve(mustMiddleware(t, lim, WithFailOpen())(next), newRequest("GET", "/", "192.0.2.1:1")); w.Code != 200 || next.count() != 1 {
		t.Fatalf("store failure under fail-open: status %d, handler calls %d", w.Code, next.count())
	}
}

// misconfiguredKey fails as KeyByRoutePattern does outside the mux once it
// reports the mistake as a configuration error.
func misconfiguredKey(*http.Request) (string, error) {
	return "", fmt.Errorf("%w: KeyByRoutePattern has no route pattern: wrap the handlers registered on the ServeMux, not the mux", ErrInvalidOption)
}

// Errors the client causes are answered 4xx under every error policy and
// never fail open; a misconfiguration is a 500, never fail-open either.
func TestMiddlewareClientErrorsNeverFailOpen(t *testing.T) {
	tooLarge := func(*http.Request) (string, error) {
		return "", fmt.Errorf("%w: %w", ErrInvalidBody, &http.MaxBytesError{Limit: 64})
	}
	tests := []struct {
		name   string
		lim    func(t *testing.T) Limiter
		key    KeyFunc
		req    func() *http.Request
		status int
	}{
		{"no key", nil, mustKey(KeyByHeader("X-Account")), nil, 400},
		{"no client IP", nil, nil, func() *http.Request { return newRequest("GET", "/", "garbage") }, 400},
		{"invalid body", nil, mustKey(KeyByJSONField("user", 1024)), func() *http.Request {
			r := newRequest("POST", "/", "192.0.2.1:1")
			r.Body = ioNopCloser(`{"user": `)
			r.Header.Set("Content-Type", "application/json")
			return r
		}, 400},
		{"body too large", nil, tooLarge, nil, 413},
		{"key too long", func(t *testing.T) Limiter {
			return mustTokenBucket(t, PerMinute(5), WithMaxKeyLength(16))
		}, mustKey(KeyByHeader("X-Account")), func() *http.Request {
			r := newRequest("GET", "/", "192.0.2.1:1")
			r.Header.Set("X-Account", strings.Repeat("a", 100))
			return r
		}, 400},
		{"misconfigured key function", nil, misconfiguredKey, nil, 500},
	}
	for _, tt := range tests {
		for _, failOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failOpen=%v", tt.name, failOpen), func(t *testing.T) {
				var lim Limiter = mustTokenBucket(t, PerMinute(5))
				if tt.lim != nil {
					lim = tt.lim(t)
				}
				var events []DecisionEvent
				opts := []MiddlewareOption{WithDecisionHook(func(e DecisionEvent) { events = append(events, e) }),
					WithLogger(slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)))}
				if tt.key != nil {
					opts = append(opts, WithKeyFunc(tt.key))
				}
				if failOpen {
					opts = append(opts, WithFailOpen())
				}
				next := &countingHandler{}
				r := newRequest("GET", "/", "192.0.2.1:1")
				if tt.req != nil {
					r = tt.req()
				}
				w := serve(mustMiddleware(t, lim, opts...)(next), r)
				if next.count() != 0 {
					t.Fatal("the handler ran: a client-caused error opened the gate")
				}
				if w.Code != tt.status {
					t.Errorf("status %d, want %d", w.Code, tt.status)
				}
				if len(events) != 1 || !events[0].Blocked || events[0].Policy != DefaultPolicyName {
					t.Errorf("events %+v: want one blocked event under policy %q", events, DefaultPolicyName)
				}
			})
		}
	}
}

// TestMiddlewareKeyAndCostErrorsNeverFailOpen: an error from keying or
// pricing a request is no failure of the limiter, so fail-open must not
// let it through (red-team finding 9: a cost function failing on a
// truncated JSON body passed 10 of 10 on a quota of 1, uncounted). Ten
// such requests on a quota of 1 reach the handler 0 times under fail
// closed, fail open and a custom error handler, with the status
// ErrorStatus gives; only dry-run lets them through. The quota is left
// whole: an honest request passes after them.
func TestMiddlewareKeyAndCostErrorsNeverFailOpen(t *testing.T) {
	batch := func(r *http.Request) (int, error) { // prices a batch by its items
		var b struct{ Items []string }
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			return 0, fmt.Errorf("batch: %w", err)
		}
		return len(b.Items), nil
	}
	clientBatch := func(r *http.Request) (int, error) { // says whose fault it is
		n, err := batch(r)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidBody, err)
		}
		return n, nil
	}
	session := func(r *http.Request) (string, error) { // a session lookup whose store is down
		if r.Header.Get("Cookie") == "" {
			return r.RemoteAddr, nil
		}
		return "", errors.New("session store: connection refused")
	}
	negative := func(*http.Request) (int, error) { return -1, nil }
	tests := []struct {
		name   string
		opts   []MiddlewareOption
		bad    func(r *http.Request) // makes an honest request fail to key or price
		status int
	}{
		{"cost function error", []MiddlewareOption{WithCostFunc(batch)}, truncate, 503},
		{"cost function blaming the body", []MiddlewareOption{WithCostFunc(clientBatch)}, truncate, 400},
		{"negative cost", []MiddlewareOption{WithCostFunc(negative)}, nil, 500},
		{"key function error", []MiddlewareOption{WithKeyFunc(session), WithCost(1)}, func(r *http.Request) { r.Header.Set("Cookie", "s=1") }, 503},
	}
	for _, tt := range tests {
		for _, pol := range []struct {
			name string
			opt  MiddlewareOption
			runs int
		}{{"closed", nil, 0}, {"open", WithFailOpen(), 0}, {"handler", WithErrorHandler(FailClosed), 0}, {"dry", WithDryRun(), 10}} {
			t.Run(tt.name+"/"+pol.name, func(t *testing.T) {
				var events []DecisionEvent
				opts := append([]MiddlewareOption{WithDecisionHook(func(e DecisionEvent) { events = append(events, e) }),
					WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)))}, tt.opts...)
				if pol.opt != nil {
					opts = append(opts, pol.opt)
				}
				next := &countingHandler{}
				h := mustMiddleware(t, mustTokenBucket(t, PerHour(1)), opts...)(next)
				for i := 0; i < 10; i++ {
					r := newRequest("POST", "/batch", "192.0.2.1:1")
					r.Body = ioNopCloser(`{"items":["a"]}`)
					if tt.bad != nil {
						tt.bad(r)
					}
					want := tt.status
					if pol.runs > 0 {
						want = http.StatusOK
					}
					if w := serve(h, r); w.Code != want {
						t.Fatalf("request %d: status %d, want %d", i, w.Code, want)
					}
				}
				if next.count() != pol.runs {
					t.Fatalf("the handler ran %d times, want %d: a key or cost error opened the gate", next.count(), pol.runs)
				}
				for _, ev := range events {
					if ev.Err == nil || ev.Blocked != (pol.runs == 0) || ErrorStatus(ev.Err) != tt.status {
						t.Fatalf("event %+v: want an error answered %d, blocked %v", ev, tt.status, pol.runs == 0)
					}
				}
				r := newRequest("POST", "/batch", "192.0.2.1:1")
				r.Body = ioNopCloser(`{"items":["a"]}`)
				if tt.name == "negative cost" {
					return // no honest request to price
				}
				if w := serve(h, r); w.Code != 200 {
					t.Errorf("an honest request after them: status %d, want 200 (the quota was spent)", w.Code)
				}
			})
		}
	}
}

// truncate gives r a JSON body cut short.
func truncate(r *http.Request) { r.Body = ioNopCloser(`{"items":["a"]`) }

// ioNopCloser is a request body of s.
func ioNopCloser(s string) *nopBody { return &nopBody{strings.NewReader(s)} }

type nopBody struct{ *strings.Reader }

func (*nopBody) Close() error { return nil }

// A misconfigured key function is logged at ERROR once, with the message
// naming the fix, however many requests it refuses; client errors are
// logged at DEBUG at most once a second, never at ERROR.
func TestMiddlewareErrorLogsCannotFlood(t *testing.T) {
	clk := newFakeClock()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := mustMiddleware(t, mustTokenBucket(t, PerMinute(5)), WithKeyFunc(misconfiguredKey),
		WithLogger(logger), WithWallClock(clk.Now))(&countingHandler{})
	for i := 0; i < 1000; i++ {
		serve(h, newRequest("GET", "/", "192.0.2.1:1"))
		clk.Advance(10 * time.Millisecond) // 10 s of requests
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || !strings.Contains(lines[0]["error"].(string), "wrap the handlers registered on the ServeMux") {
		t.Fatalf("log %v: want one ERROR line naming the fix", lines)
	}

	// Without a logger the misconfiguration still gets its line, on the
	// default logger.
	old := slog.Default()
	defer slog.SetDefault(old)
	var def bytes.Buffer
	slog.SetDefault(slog.New(slog.NewJSONHandler(&def, nil)))
	h = mustMiddleware(t, mustTokenBucket(t, PerMinute(5)), WithKeyFunc(misconfiguredKey))(&countingHandler{})
	for i := 0; i < 100; i++ {
		serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	}
	if lines := logLines(t, &def); len(lines) != 1 || lines[0]["level"] != "ERROR" {
		t.Fatalf("default logger %v: want one ERROR line", lines)
	}

	logs.Reset()
	h = mustMiddleware(t, mustTokenBucket(t, PerMinute(5)), WithKeyFunc(mustKey(KeyByHeader("X-Account"))),
		WithLogger(logger), WithWallClock(clk.Now))(&countingHandler{})
	for i := 0; i < 1000; i++ {
		serve(h, newRequest("GET", "/", "192.0.2.1:1"))
		clk.Advance(10 * time.Millisecond)
	}
	lines = logLines(t, &logs)
	if len(lines) < 9 || len(lines) > 11 {
		t.Fatalf("%d lines for 10 s of keyless requests, want one a second", len(lines))
	}
	for _, l := range lines {
		if l["level"] != "DEBUG" || l["policy"] != DefaultPolicyName || strings.Contains(l["error"].(string), "no policy applies") {
			t.Fatalf("line %v: want DEBUG under policy %q, the key function's own error", l, DefaultPolicyName)
		}
	}
}

func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		out = append(out, decodeLogLine(t, l))
	}
	return out
}

// 50 concurrent wrong passwords on a quota of 5: exactly 5 reach the
// handler, held there together by a barrier, the other 45 are refused.
func TestCountStatusConcurrentAttemptsNeverExceedLimit(t *testing.T) {
	const attempts, limit = 50, 5
	clk := newFakeClock()
	tb := mustTokenBucket(t, PerHour(limit), WithClock(clk.Now))
	var entered atomic.Int32
	events := make(chan int, attempts) // 1: entered the handler, 0: refused
	release := make(chan struct{})
	h := mustMiddleware(t, tb, WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			entered.Add(1)
			events <- 1
			<-release
			w.WriteHeader(http.StatusUnauthorized)
		}))
	var wg sync.WaitGroup
	codes := make([]int, attempts)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := serve(h, newRequest("POST", "/login", "192.0.2.1:1"))
			codes[i] = w.Code
			if w.Code == http.StatusTooManyRequests {
				events <- 0
			}
		}()
	}
	// Every attempt has either entered the handler or been refused: only
	// then may the handlers finish.
	for i := 0; i < attempts; i++ {
		<-events
	}
	close(release)
	wg.Wait()
	var unauthorized, refused int
	for _, c := range codes {
		switch c {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			refused++
		}
	}
	if entered.Load() != limit || unauthorized != limit || refused != attempts-limit {
		t.Fatalf("%d reached the handler (%d × 401, %d × 429), want exactly %d", entered.Load(), unauthorized, refused, limit)
	}
	if w := serve(h, newRequest("POST", "/login", "192.0.2.1:1")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("after %d counted failures: status %d, want 429", limit, w.Code)
	}
}

// Concurrent successes hold the quota while in flight and give it all
// back: afterwards the client has its full quota.
func TestCountStatusRefundsWhatDoesNotCount(t *testing.T) {
	clk := newFakeClock()
	tb := mustTokenBucket(t, PerHour(5), WithClock(clk.Now))
	h := mustMiddleware(t, tb, WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))(&countingHandler{})
	for i := 0; i < 20; i++ {
		if w := serve(h, newRequest("POST", "/login", "192.0.2.1:1")); w.Code != 200 {
			t.Fatalf("success %d: status %d", i, w.Code)
		}
	}
	d, _ := tb.AllowN(context.Background(), "192.0.2.1", 0)
	if d.Remaining != 5 {
		t.Fatalf("Remaining %d after 20 successes, want 5: successes were counted", d.Remaining)
	}
}

// A handler that panics is counted, whatever it wrote before, and the
// panic goes on up.
func TestCountStatusPanickingHandlerIsCounted(t *testing.T) {
	for _, value := range []any{http.ErrAbortHandler, "boom"} {
		clk := newFakeClock()
		tb := mustTokenBucket(t, PerHour(5), WithClock(clk.Now))
		h := mustMiddleware(t, tb, WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))(
			http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusOK) // looks like a success...
				panic(value)                 // ...then aborts
			}))
		func() {
			defer func() {
				if got := recover(); got != value {
					t.Fatalf("recovered %v, want the handler's panic %v", got, value)
				}
			}()
			serve(h, newRequest("POST", "/login", "192.0.2.1:1"))
		}()
		d, _ := tb.AllowN(context.Background(), "192.0.2.1", 0)
		if d.Remaining != 4 {
			t.Fatalf("panic %v: Remaining %d, want 4: the panicking request must count", value, d.Remaining)
		}
	}
}

// noRefundLimiter is a Limiter that cannot give units back.
type noRefundLimiter struct{ fakeLimiter }

// Counting by status needs a Refunder: refused at construction otherwise.
func TestCountStatusNeedsRefunder(t *testing.T) {
	shared, err := FromRateLimiter(rate.NewLimiter(1, 5))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Limiter{shared, &noRefundLimiter{}} {
		if _, err := NewMiddleware(l, WithCountStatus(func(int) bool { return true })); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%T with WithCountStatus: %v, want ErrInvalidOption", l, err)
		}
	}
	sel, err := NewPolicySelector(
		Policy{Name: "user", Limiter: mustTokenBucket(t, PerHour(5)), Key: headerKey("X-User")},
		Policy{Name: "shared", Limiter: shared, Key: headerKey("X-Ip")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewPolicyMiddleware(sel, WithCountStatus(func(int) bool { return true })); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("selector with a non-refunding policy: %v, want ErrInvalidOption", err)
	}
}

// A WithCost that no request could ever pay is refused at construction,
// for every limiter that reports its capacity, and for every policy of a
// selector.
func TestNewMiddlewareRefusesCostAboveCapacity(t *testing.T) {
	tb := mustTokenBucket(t, PerMinute(10), WithBurst(4))
	sl, err := NewSlidingLog(PerMinute(6))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewSlidingCounter(PerMinute(7))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := All(sl, tb)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := FromRateLimiter(rate.NewLimiter(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	infinite, err := FromRateLimiter(rate.NewLimiter(rate.Inf, 0))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		l        Limiter
		capacity int
	}{{tb, 4}, {sl, 6}, {sc, 7}, {comp, 4}, {shared, 3}, {infinite, NoCapacityBound}}
	for _, tt := range tests {
		if got := tt.l.(Capacitor).Capacity(); got != tt.capacity {
			t.Errorf("%T.Capacity() = %d, want %d", tt.l, got, tt.capacity)
		}
		if tt.capacity == NoCapacityBound {
			if _, err := NewMiddleware(tt.l, WithCost(maxLimit)); err != nil {
				t.Errorf("%T without a bound refused cost %d: %v", tt.l, maxLimit, err)
			}
			continue
		}
		if _, err := NewMiddleware(tt.l, WithCost(tt.capacity)); err != nil {
			t.Errorf("%T: cost = capacity %d refused: %v", tt.l, tt.capacity, err)
		}
		_, err := NewMiddleware(tt.l, WithCost(tt.capacity+1))
		if !errors.Is(err, ErrInvalidOption) || !errors.Is(err, ErrCostExceedsLimit) {
			t.Errorf("%T: cost %d above capacity %d: %v, want ErrInvalidOption and ErrCostExceedsLimit", tt.l, tt.capacity+1, tt.capacity, err)
		}
	}
	sel, err := NewPolicySelector(
		Policy{Name: "big", Limiter: mustTokenBucket(t, PerMinute(100)), Key: headerKey("X-User")},
		Policy{Name: "small", Limiter: tb, Key: headerKey("X-Ip")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewPolicyMiddleware(sel, WithCost(5)); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), `"small"`) {
		t.Errorf("selector, cost 5 above policy small's 4: %v", err)
	}
}

// headerCase is one decision a limiter reports, with what the headers
// must say about it.
type headerCase struct {
	name string
	d    Decision
}

// Headers never lie, whatever the limiter reports: t ≤ w, waits saturate
// instead of wrapping, counts are never negative.
func TestQuotaHeadersNeverLie(t *testing.T) {
	const maxWait = time.Duration(math.MaxInt64)
	const maxSecs = int64(9223372037) // MaxInt64 ns rounded up to seconds
	cases := []headerCase{
		{"292-year reset", Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: maxWait}},
		{"292-year wait", Decision{Limit: 10, RetryAfter: maxWait, ResetAfter: maxWait}},
		{"a wait just over the window", Decision{Limit: 10, RetryAfter: time.Minute + 1, ResetAfter: time.Minute + 1}},
		{"a wait of two windows", Decision{Limit: 10, RetryAfter: 119 * time.Second, ResetAfter: 119 * time.Second}},
		{"negative counts and waits", Decision{Limit: 10, Remaining: -5, RetryAfter: -time.Hour, ResetAfter: -time.Hour}},
		{"remaining above limit", Decision{Allowed: true, Limit: 10, Remaining: 1 << 40, ResetAfter: time.Second}},
	}
	clk := newFakeClock()
	for _, reportsRate := range []bool{true, false} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/rate=%v", tc.name, reportsRate), func(t *testing.T) {
				var lim Limiter = &fakeLimiter{d: tc.d}
				if reportsRate {
					lim = &rateLimiter{fakeLimiter: fakeLimiter{d: tc.d}, rate: PerMinute(10)}
				}
				w := serve(mustMiddleware(t, lim, WithHeaders(HeadersBoth), WithWallClock(clk.Now))(&countingHandler{}),
					newRequest("GET", "/", "192.0.2.1:1"))
				pol, err := parseSFList(w.Header().Get("RateLimit-Policy"))
				if err != nil || len(pol) != 1 {
					t.Fatalf("RateLimit-Policy %q: %v", w.Header().Get("RateLimit-Policy"), err)
				}
				rl, err := parseSFList(w.Header().Get("RateLimit"))
				if err != nil || len(rl) != 1 {
					t.Fatalf("RateLimit %q: %v", w.Header().Get("RateLimit"), err)
				}
				tSecs, r := rl[0].params["t"], rl[0].params["r"]
				if win, ok := pol[0].params["w"]; ok != reportsRate || (ok && tSecs > win) {
					t.Errorf("RateLimit t=%d with w=%d (reported %v): t must not exceed w", tSecs, win, ok)
				}
				if tSecs < 0 || tSecs > maxSecs || r < 0 || r > pol[0].params["q"] {
					t.Errorf("RateLimit %q: t or r out of range", w.Header().Get("RateLimit"))
				}
				reset, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
				if now := clk.Now().Unix(); err != nil || reset < now || reset > now+maxSecs {
					t.Errorf("X-RateLimit-Reset %q: not within [now, now+292 years]", w.Header().Get("X-RateLimit-Reset"))
				}
				if rem, err := strconv.Atoi(w.Header().Get("X-RateLimit-Remaining")); err != nil || rem < 0 || rem > tc.d.Limit {
					t.Errorf("X-RateLimit-Remaining %q", w.Header().Get("X-RateLimit-Remaining"))
				}
				if !tc.d.Allowed {
					ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
					want := max(ceilSeconds(tc.d.RetryAfter), 1)
					if err != nil || ra != want {
						t.Errorf("Retry-After %q, want %d (the exact wait, rounded up)", w.Header().Get("Retry-After"), want)
					}
				}
			})
		}
	}
}

// The real window limiters, driven across their windows: t never exceeds
// the w they advertise.
func TestWindowLimitersHeadersStayWithinWindow(t *testing.T) {
	for _, name := range []string{"sliding log", "sliding counter"} {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			var lim Limiter
			var err error
			if name == "sliding log" {
				lim, err = NewSlidingLog(PerMinute(3), WithClock(clk.Now))
			} else {
				lim, err = NewSlidingCounter(PerMinute(3), WithClock(clk.Now))
			}
			if err != nil {
				t.Fatal(err)
			}
			h := mustMiddleware(t, lim, WithWallClock(clk.Now))(&countingHandler{})
			for i := 0; i < 600; i++ {
				w := serve(h, newRequest("GET", "/", "192.0.2.1:1"))
				rl, err := parseSFList(w.Header().Get("RateLimit"))
				if err != nil || len(rl) != 1 {
					t.Fatalf("RateLimit %q: %v", w.Header().Get("RateLimit"), err)
				}
				if tSecs := rl[0].params["t"]; tSecs > 60 || tSecs < 0 {
					t.Fatalf("step %d (%s): t=%d with w=60", i, clk.Now().Format("15:04:05.000"), tSecs)
				}
				// Odd nanoseconds too: the sliding log rounds event times up
				// to its unit, which once made ResetAfter 60 s + 49 ns, t=61.
				clk.Advance(time.Duration(i%7)*time.Second + 333*time.Millisecond + time.Duration(i%3)*time.Nanosecond)
			}
		})
	}
}

// A proxy whose forwarding headers are not trusted makes every client
// share its limit: the middleware says so, at WARN, once a minute at most,
// and only when the headers were really ignored.
func TestMiddlewareWarnsAboutUntrustedForwarding(t *testing.T) {
	trusting, err := KeyByIP(TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		key    KeyFunc
		peer   string
		header string
		warn   bool
	}{
		{"private proxy, headers ignored", nil, "10.1.2.3:4444", "X-Forwarded-For", true},
		{"loopback proxy, X-Real-IP ignored", nil, "127.0.0.1:4444", "X-Real-Ip", true},
		{"IPv6 ULA proxy, Forwarded ignored", nil, "[fd00::1]:4444", "Forwarded", true},
		{"private proxy, headers trusted", trusting, "10.1.2.3:4444", "X-Forwarded-For", false},
		{"public peer", nil, "198.51.100.7:4444", "X-Forwarded-For", false},
		{"private peer, no header", nil, "10.1.2.3:4444", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			var logs bytes.Buffer
			opts := []MiddlewareOption{WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))), WithWallClock(clk.Now)}
			if tt.key != nil {
				opts = append(opts, WithKeyFunc(tt.key))
			}
			h := mustMiddleware(t, mustTokenBucket(t, PerSecond(1000), WithClock(clk.Now)), opts...)(&countingHandler{})
			req := func() {
				r := newRequest("GET", "/", tt.peer)
				if tt.header == "Forwarded" {
					r.Header.Set(tt.header, "for=203.0.113.9")
				} else if tt.header != "" {
					r.Header.Set(tt.header, "203.0.113.9")
				}
				if w := serve(h, r); w.Code != 200 {
					t.Fatalf("status %d", w.Code)
				}
			}
			for i := 0; i < 100; i++ { // 50 s of requests
				req()
				clk.Advance(500 * time.Millisecond)
			}
			lines := logLines(t, &logs)
			if !tt.warn {
				if len(lines) != 0 {
					t.Fatalf("lines %v, want none", lines)
				}
				return
			}
			if len(lines) != 1 || lines[0]["level"] != "WARN" || !strings.Contains(lines[0]["msg"].(string), "TrustProxies") {
				t.Fatalf("lines %v: want one WARN naming TrustProxies", lines)
			}
			clk.Advance(time.Minute)
			req()
			if lines := logLines(t, &logs); len(lines) != 2 {
				t.Fatalf("a minute later: %d lines, want a second one", len(lines))
			}
		})
	}
}

// statsLimiter is a limiter whose store reports live evictions.
type statsLimiter struct {
	fakeLimiter
	live atomic.Uint64
}

func (l *statsLimiter) Stats() Stats { return Stats{EvictedLive: l.live.Load()} }

// Live evictions (a key spray resetting limits) are visible through the
// middleware: in the decision hook and as a WARN naming WithMaxKeys,
// sampled at most once a second.
func TestMiddlewareReportsLiveEvictions(t *testing.T) {
	clk := newFakeClock()
	lim := &statsLimiter{fakeLimiter: fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 9}}}
	lim.live.Store(7) // before the middleware: not reported
	var logs bytes.Buffer
	var seen []uint64
	h := mustMiddleware(t, lim, WithWallClock(clk.Now),
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		WithDecisionHook(func(e DecisionEvent) {
			if e.EvictedLive > 0 {
				seen = append(seen, e.EvictedLive)
			}
		}))(&countingHandler{})
	req := func() { serve(h, newRequest("GET", "/", "192.0.2.1:1")) }
	req()
	if len(seen) != 0 || logs.Len() != 0 {
		t.Fatalf("no eviction yet: hook %v, log %q", seen, logs.String())
	}
	lim.live.Add(40)
	req() // within the second: not sampled
	clk.Advance(time.Second)
	req()
	req()
	if len(seen) != 1 || seen[0] != 40 {
		t.Fatalf("hook saw %v, want one report of 40", seen)
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 || lines[0]["level"] != "WARN" || lines[0]["evicted_live"] != float64(40) ||
		!strings.Contains(lines[0]["msg"].(string), "WithMaxKeys") {
		t.Fatalf("log %v: want one WARN with evicted_live=40 naming WithMaxKeys", lines)
	}
	// A spray that goes on: reported to the hook every second, logged once
	// a minute with the total.
	for i := 0; i < 70; i++ {
		lim.live.Add(3)
		clk.Advance(time.Second)
		req()
	}
	if len(seen) != 71 {
		t.Fatalf("hook saw %d reports, want 71", len(seen))
	}
	lines = logLines(t, &logs)
	if len(lines) != 2 || lines[1]["evicted_live"] != float64(180) {
		t.Fatalf("log %v: want a second line a minute later with the 180 evicted since", lines)
	}
}

// io.Copy to the wrapped writer of WithCountStatus keeps the wrapped
// writer's ReadFrom (sendfile), and records the status as written.
func TestCountStatusWriterReadFrom(t *testing.T) {
	var used bool
	rf := &readFromRecorder{ResponseWriter: nil, used: &used}
	rec := &benchWriter{h: http.Header{}}
	rf.ResponseWriter = rec
	sw := &statusWriter{ResponseWriter: rf}
	n, err := io.Copy(sw, struct{ io.Reader }{strings.NewReader("body")}) // no WriteTo: io.Copy must use ReadFrom
	if err != nil || n != 4 || !used || sw.statusCode() != http.StatusOK {
		t.Fatalf("io.Copy: %d, %v; ReadFrom used %v; status %d", n, err, used, sw.statusCode())
	}
	// Without a ReadFrom below, the copy still works.
	sw = &statusWriter{ResponseWriter: &benchWriter{h: http.Header{}}}
	if n, err := sw.ReadFrom(strings.NewReader("body")); err != nil || n != 4 {
		t.Fatalf("ReadFrom without one below: %d, %v", n, err)
	}
}

// readFromRecorder is a ResponseWriter with its own ReadFrom.
type readFromRecorder struct {
	http.ResponseWriter
	used *bool
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	*r.used = true
	return io.Copy(r.ResponseWriter, src)
}

// With a hook and no logger, the eviction count is sampled on a random
// one request in hookWatchOneIn (then at most once a second), so a metrics
// hook does not pay a clock read per request; a spray still reaches it.
func TestHookAloneSeesLiveEvictions(t *testing.T) {
	clk := newFakeClock()
	lim := &statsLimiter{fakeLimiter: fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 9}}}
	var seen []uint64
	h := mustMiddleware(t, lim, WithWallClock(clk.Now),
		WithDecisionHook(func(e DecisionEvent) {
			if e.EvictedLive > 0 {
				seen = append(seen, e.EvictedLive)
			}
		}))(&countingHandler{})
	req := func() { serve(h, newRequest("GET", "/", "192.0.2.1:1")) }
	for range 2 * hookWatchOneIn {
		req()
	}
	if len(seen) != 0 {
		t.Fatalf("no eviction yet: hook saw %v", seen)
	}
	lim.live.Add(40)
	clk.Advance(time.Second)
	// The chance that 50 × hookWatchOneIn requests pick none is e^-50.
	for i := 0; i < 50*hookWatchOneIn && len(seen) == 0; i++ {
		req()
	}
	if len(seen) != 1 || seen[0] != 40 {
		t.Fatalf("hook saw %v, want one report of 40", seen)
	}
	for range 10 * hookWatchOneIn { // within the same second: no new sample
		req()
	}
	if len(seen) != 1 {
		t.Fatalf("hook saw %v within one second, want one report", seen)
	}
}

// A spray past the size of the store's debt memory is visible through the
// middleware too: the hook's DebtsLost counts the debts that had to share
// a bound (so that fresh keys may start limited), and the WARN names
// WithDebtMemory instead of WithMaxKeys alone.
func TestMiddlewareReportsLostDebts(t *testing.T) {
	clk := newFakeClock()
	lim, err := NewTokenBucket(Rate{Limit: 1, Period: time.Hour},
		WithMaxKeys(8), WithShards(1), WithDebtMemory(1), WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var evicted, lost uint64
	h := mustMiddleware(t, lim, WithWallClock(clk.Now),
		WithKeyFunc(func(r *http.Request) (string, error) { return r.Header.Get("K"), nil }),
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		WithDecisionHook(func(e DecisionEvent) { evicted += e.EvictedLive; lost += e.DebtsLost }))(&countingHandler{})
	req := func(key string) int {
		r := newRequest("GET", "/", "192.0.2.1:1")
		r.Header.Set("K", key)
		return serve(h, r).Code
	}
	// Each key spends its whole quota: every eviction is live, and 64 keys
	// through an 8-key store overflow a debt memory of about 8 entries
	// (past that, fresh keys may start limited: the codes do not matter).
	for i := range 64 {
		req(fmt.Sprint("spray", i))
	}
	clk.Advance(time.Second)
	req("sample")
	st := lim.Stats()
	if st.Merged == 0 {
		t.Fatalf("the spray must overflow the debt memory: %+v", st)
	}
	if evicted != st.EvictedLive || lost != st.Merged+st.Forgotten {
		t.Fatalf("hook saw EvictedLive %d, DebtsLost %d; Stats %+v", evicted, lost, st)
	}
	lines := logLines(t, &logs)
	var warn map[string]any
	for _, l := range lines {
		if l["level"] == "WARN" && l["debts_lost"] != nil {
			warn = l
		}
	}
	if warn == nil || warn["debts_lost"] != float64(st.Merged+st.Forgotten) ||
		!strings.Contains(warn["msg"].(string), "WithDebtMemory") {
		t.Fatalf("log %v: want a WARN with debts_lost = %d naming WithDebtMemory", lines, st.Merged+st.Forgotten)
	}
}
