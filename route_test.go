package floodgate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// routeClock is a frozen clock: no quota comes back during a test.
func routeClock() func() time.Time {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time { return t0 }
}

// rawRequest parses a request exactly as the server would read it off the
// wire, so that paths such as "//auth" or "/a/./b" reach the handler
// unchanged (a client library would clean them).
func rawRequest(t *testing.T, method, target, host string) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
		method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
	if err != nil {
		t.Fatalf("parse %s %s: %v", method, target, err)
	}
	r.RemoteAddr = "192.0.2.10:4000"
	return r
}

// probeAttack is one way to reach the probe handler of a real ServeMux.
type probeAttack struct {
	method, target, host string
	routed               bool // the mux runs the probe handler for it
}

// probeAttacks are the requests an attacker tries against
// "GET /auth/available/user_id": every spelling the mux might route to the
// handler. Those it does route must all be limited.
var probeAttacks = []probeAttack{
	{"GET", "/auth/available/user_id?userId=a", "example.com", true},
	{"HEAD", "/auth/available/user_id?userId=a", "example.com", true}, // ServeMux routes HEAD to GET patterns
	{"HEAD", "/auth/available/user_id", "EXAMPLE.com:8443", true},
	{"GET", "//auth/available/user_id", "example.com", false},        // redirected by the mux
	{"GET", "/auth/./available/user_id", "example.com", false},       // redirected
	{"GET", "/auth/x/../available/user_id", "example.com", false},    // redirected
	{"HEAD", "/auth//available/user_id", "example.com", false},       // redirected
	{"GET", "/auth/available/user_id/", "example.com", false},        // 404
	{"GET", "/auth%2Favailable/user_id", "example.com", false},       // 404: %2F does not split a segment
	{"GET", "/auth/available%2Fuser_id", "example.com", false},       // 404
	{"GET", "/auth/available/%75ser_id", "example.com", true},        // routed: segments are unescaped
	{"HEAD", "/auth/available/user%5Fid", "example.com", true},       // routed
	{"GET", "/AUTH/available/user_id", "example.com", false},         // 404: paths are case-sensitive
	{"GET", "http://other.example/auth/available/user_id", "", true}, // absolute form
	{"POST", "/auth/available/user_id", "example.com", false},        // 405
}

// TestRouteAttacksAgreeWithServeMux sends each spelling of the probe route
// several times through the limiter wrapped around a real ServeMux and
// checks that the handler runs at most the limit's quota of times: every
// request the mux routes to the handler was limited.
func TestRouteAttacksAgreeWithServeMux(t *testing.T) {
	const quota, tries = 2, 5
	matchers := map[string]func(t *testing.T) func(*http.Request) bool{
		"MatchRoute": func(*testing.T) func(*http.Request) bool {
			return MatchRoute(http.MethodGet, "/auth/available/user_id")
		},
		"MatchPattern": func(t *testing.T) func(*http.Request) bool {
			m, err := MatchPattern("GET /auth/available/user_id")
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		"NewRoutes": nil, // the route table, below
	}
	for name, matcher := range matchers {
		for _, a := range probeAttacks {
			t.Run(name+"/"+a.method+" "+a.target, func(t *testing.T) {
				lim, err := NewTokenBucket(Rate{Limit: quota, Period: time.Hour}, WithClock(routeClock()))
				if err != nil {
					t.Fatal(err)
				}
				var ran atomic.Int32
				mux := http.NewServeMux()
				mux.HandleFunc("GET /auth/available/user_id", func(http.ResponseWriter, *http.Request) { ran.Add(1) })
				var mw func(http.Handler) http.Handler
				if matcher != nil {
					mw, err = NewMiddleware(lim, WithOnly(matcher(t)))
				} else {
					var routes *Routes
					routes, err = NewRoutes(Route{Pattern: "GET /auth/available/user_id",
						Policies: []Policy{{Name: "probe", Limiter: lim, Key: routeKeyByIP(t)}}})
					if err != nil {
						t.Fatal(err)
					}
					mw, err = NewRouteMiddleware(routes)
				}
				if err != nil {
					t.Fatal(err)
				}
				h := mw(mux)
				for range tries {
					h.ServeHTTP(httptest.NewRecorder(), rawRequest(t, a.method, a.target, a.host))
				}
				want := int32(0)
				if a.routed {
					want = quota
				}
				if got := ran.Load(); got != want {
					t.Fatalf("handler ran %d times for %d requests, want %d (quota %d, routed %v)", got, tries, want, quota, a.routed)
				}
			})
		}
	}
}

func routeKeyByIP(t *testing.T) KeyFunc {
	t.Helper()
	k, err := KeyByIP()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestMatchPatternFollowsServeMux checks MatchPattern against ServeMux's
// rules: hosts, wildcards, {$}, subtrees, HEAD with GET, and no match
// where the mux would redirect.
func TestMatchPatternFollowsServeMux(t *testing.T) {
	tests := []struct {
		pattern              string
		method, target, host string
		want                 bool
	}{
		{"GET /users/{id}", "GET", "/users/42", "a.example", true},
		{"GET /users/{id}", "HEAD", "/users/42", "a.example", true},
		{"GET /users/{id}", "POST", "/users/42", "a.example", false},
		{"GET /users/{id}", "GET", "/users/42/posts", "a.example", false},
		{"GET /users/{id}", "GET", "/users/", "a.example", false},
		{"HEAD /users/{id}", "GET", "/users/42", "a.example", false},
		{"/files/{path...}", "DELETE", "/files/a/b/c", "a.example", true},
		{"/files/", "GET", "/files/a/b", "a.example", true},
		{"/files/", "GET", "/files", "a.example", false}, // redirected to /files/
		{"/files/{$}", "GET", "/files/", "a.example", true},
		{"/files/{$}", "GET", "/files/a", "a.example", false},
		{"api.example.com/v1/", "GET", "/v1/x", "api.example.com", true},
		{"api.example.com/v1/", "GET", "/v1/x", "api.example.com:8443", true},
		{"api.example.com/v1/", "GET", "/v1/x", "www.example.com", false},
		{"POST /signup", "POST", "/signup", "a.example", true},
		{"POST /signup", "POST", "/./signup", "a.example", false}, // redirected
		{"POST /signup", "POST", "/sign%75p", "a.example", true},
		{"/", "PATCH", "/anything/at/all", "a.example", true},
	}
	for _, tt := range tests {
		match, err := MatchPattern(tt.pattern)
		if err != nil {
			t.Fatalf("MatchPattern(%q): %v", tt.pattern, err)
		}
		r := rawRequest(t, tt.method, tt.target, tt.host)
		if got := match(r); got != tt.want {
			t.Errorf("MatchPattern(%q) on %s %s (host %s) = %v, want %v", tt.pattern, tt.method, tt.target, tt.host, got, tt.want)
		}
		// The same answer as a real ServeMux holding only the pattern:
		// does the handler run?
		ran := false
		mux := http.NewServeMux()
		mux.HandleFunc(tt.pattern, func(http.ResponseWriter, *http.Request) { ran = true })
		mux.ServeHTTP(httptest.NewRecorder(), r)
		if ran != tt.want {
			t.Errorf("ServeMux with %q on %s %s ran the handler: %v; the table is wrong", tt.pattern, tt.method, tt.target, ran)
		}
	}
}

func TestMatchPatternInvalid(t *testing.T) {
	for _, pattern := range []string{"", "GET", "users", "/users/{", "/users/{id}/{id}", "/a/{x...}/b", "GET example.com", "/{x}/{$}{y}"} {
		match, err := MatchPattern(pattern)
		if !errors.Is(err, ErrInvalidOption) || match != nil {
			t.Errorf("MatchPattern(%q) = %v, %v; want an error wrapping ErrInvalidOption", pattern, match != nil, err)
		}
	}
}

// TestHeadCountsWithGet: a GET limit is one quota for GET and HEAD
// together, whichever matcher scopes it.
func TestHeadCountsWithGet(t *testing.T) {
	pattern, err := MatchPattern("GET /auth/available/user_id")
	if err != nil {
		t.Fatal(err)
	}
	for name, match := range map[string]func(*http.Request) bool{
		"MatchRoute":   MatchRoute(http.MethodGet, "/auth/available/user_id"),
		"MatchPattern": pattern,
	} {
		lim, err := NewTokenBucket(Rate{Limit: 3, Period: time.Hour}, WithClock(routeClock()))
		if err != nil {
			t.Fatal(err)
		}
		mw, err := NewMiddleware(lim, WithOnly(match))
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var codes []int
		for _, method := range []string{"GET", "HEAD", "GET", "HEAD", "GET"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, rawRequest(t, method, "/auth/available/user_id", "example.com"))
			codes = append(codes, w.Code)
		}
		want := []int{200, 200, 200, 429, 429}
		if !slices.Equal(codes, want) {
			t.Errorf("%s: GET/HEAD alternating got %v, want %v", name, codes, want)
		}
	}
	// MatchRoute for HEAD itself matches only HEAD.
	if MatchRoute(http.MethodHead, "/x")(rawRequest(t, "GET", "/x", "example.com")) {
		t.Error("MatchRoute(HEAD) matched a GET request")
	}
}

// recLimiter allows everything and records the keys it was asked about.
type recLimiter struct {
	mu   sync.Mutex
	keys []string
}

func (l *recLimiter) AllowN(_ context.Context, key string, n int) (Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, key)
	return Decision{Allowed: true, Limit: 10, Remaining: 10 - n}, nil
}

func (l *recLimiter) calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// TestRouteMiddlewarePrecedence: the rule that applies is the route that
// runs, with ServeMux's precedence, and each answer names its policy.
func TestRouteMiddlewarePrecedence(t *testing.T) {
	limiters := map[string]*recLimiter{}
	patterns := map[string]string{} // policy name → its route's pattern
	route := func(pattern, name string) Route {
		l := &recLimiter{}
		limiters[name] = l
		patterns[name] = pattern
		return Route{Pattern: pattern, Policies: []Policy{{Name: name, Limiter: l, Key: routeKeyByIP(t)}}}
	}
	table := []Route{
		route("GET /api/", "api"),
		route("GET /api/health", "health"),
		route("HEAD /api/head-only", "head"),
		route("api.example.com/", "api-host"),
		route("POST /users/{id}/avatar", "avatar"),
	}
	tests := []struct {
		method, target, host string
		policy               string // "" for not limited
	}{
		{"GET", "/api/items", "example.com", "api"},
		{"HEAD", "/api/items", "example.com", "api"},
		{"GET", "/api/health", "example.com", "health"},
		{"HEAD", "/api/health", "example.com", "health"},
		{"GET", "/api/head-only", "example.com", "api"},
		{"HEAD", "/api/head-only", "example.com", "head"},
		{"GET", "/api/items", "api.example.com", "api-host"}, // a host pattern wins
		{"POST", "/users/7/avatar", "example.com", "avatar"},
		{"POST", "/users/7/avatar/", "example.com", ""},
		{"POST", "/api/items", "example.com", ""}, // 405 in the table's mux
		{"GET", "/api", "example.com", ""},        // redirected to /api/
		{"GET", "/other", "example.com", ""},
	}
	for _, withDefault := range []bool{false, true} {
		routes := table
		if withDefault {
			routes = append(slices.Clone(table), route("/", "default"))
		}
		rt, err := NewRoutes(routes...)
		if err != nil {
			t.Fatal(err)
		}
		mw, err := NewRouteMiddleware(rt)
		if err != nil {
			t.Fatal(err)
		}
		var handled int
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled++ }))
		for _, tt := range tests {
			want := tt.policy
			if want == "" && withDefault && tt.target != "/api" {
				want = "default" // everything but the redirect falls to "/"
			}
			before := map[string]int{}
			for name, l := range limiters {
				before[name] = l.calls()
			}
			w := httptest.NewRecorder()
			r := rawRequest(t, tt.method, tt.target, tt.host)
			h.ServeHTTP(w, r)
			for name, l := range limiters {
				asked := l.calls() > before[name]
				if asked != (name == want) {
					t.Errorf("default=%v %s %s host %s: limiter %q asked %v, want policy %q", withDefault, tt.method, tt.target, tt.host, name, asked, want)
				}
			}
			gotPolicy := w.Header().Get("RateLimit-Policy")
			if want == "" && gotPolicy != "" || want != "" && !strings.HasPrefix(gotPolicy, `"`+want+`";`) {
				t.Errorf("default=%v %s %s host %s: RateLimit-Policy %q, want policy %q", withDefault, tt.method, tt.target, tt.host, gotPolicy, want)
			}
			if p, ok := rt.Match(r); ok != (want != "") || p != patterns[want] {
				t.Errorf("Match(%s %s host %s) = %q, %v; want %q", tt.method, tt.target, tt.host, p, ok, patterns[want])
			}
		}
		if handled != len(tests) {
			t.Errorf("default=%v: handler ran %d times, want %d (every request is allowed)", withDefault, handled, len(tests))
		}
	}
}

// TestRouteMiddlewareSelectorAndOptions: a route's policies are tried in
// order like a PolicySelector's, and the middleware options apply to
// every route.
func TestRouteMiddlewareSelectorAndOptions(t *testing.T) {
	byUser, err := NewTokenBucket(Rate{Limit: 1, Period: time.Hour}, WithClock(routeClock()))
	if err != nil {
		t.Fatal(err)
	}
	byIP, err := NewTokenBucket(Rate{Limit: 2, Period: time.Hour}, WithClock(routeClock()))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := NewRoutes(Route{Pattern: "POST /signup", Policies: []Policy{
		{Name: "user", Limiter: byUser, Key: mustKey(KeyByHeader("X-User"))},
		{Name: "ip", Limiter: byIP, Key: routeKeyByIP(t)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	body, err := StaticJSON([]byte(`{"denied":true}`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewRouteMiddleware(rt, WithDeniedHandler(body), WithHeaders(HeadersLegacy))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	steps := []struct {
		user      string
		code      int
		remaining string
	}{
		{"alice", 200, "0"},
		{"alice", 429, "0"},
		{"", 200, "1"}, // no user: the IP policy
		{"bob", 200, "0"},
		{"", 200, "0"},
		{"", 429, "0"},
	}
	for i, s := range steps {
		r := rawRequest(t, "POST", "/signup", "example.com")
		if s.user != "" {
			r.Header.Set("X-User", s.user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != s.code || w.Header().Get("X-RateLimit-Remaining") != s.remaining || w.Header().Get("RateLimit") != "" {
			t.Errorf("step %d: %d remaining %q RateLimit %q; want %d remaining %q and legacy headers only",
				i, w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("RateLimit"), s.code, s.remaining)
		}
		if s.code == 429 && w.Body.String() != `{"denied":true}` {
			t.Errorf("step %d: denied body %q", i, w.Body.String())
		}
	}
}

func TestNewRoutesErrors(t *testing.T) {
	p := []Policy{{Name: "p", Limiter: &recLimiter{}, Key: KeyByMethod()}}
	tests := map[string][]Route{
		"none":               nil,
		"no policy":          {{Pattern: "GET /x"}},
		"invalid policy":     {{Pattern: "GET /x", Policies: []Policy{{Name: "p", Key: KeyByMethod()}}}},
		"invalid pattern":    {{Pattern: "GET /x/{", Policies: p}},
		"empty pattern":      {{Pattern: "", Policies: p}},
		"duplicate":          {{Pattern: "GET /x", Policies: p}, {Pattern: "GET /x", Policies: p}},
		"same route, spaced": {{Pattern: "GET /x/{id}", Policies: p}, {Pattern: "GET  /x/{name}", Policies: p}},
		"conflicting":        {{Pattern: "/users/{id}/posts", Policies: p}, {Pattern: "/users/me/{tab}", Policies: p}},
	}
	for name, routes := range tests {
		rt, err := NewRoutes(routes...)
		if !errors.Is(err, ErrInvalidOption) || rt != nil {
			t.Errorf("%s: NewRoutes = %v, %v; want an error wrapping ErrInvalidOption", name, rt, err)
		}
	}
	if _, err := NewRouteMiddleware(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewRouteMiddleware(nil): %v", err)
	}
	rt, err := NewRoutes(Route{Pattern: "GET /x", Policies: p})
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]MiddlewareOption{
		"key func":    WithKeyFunc(KeyByMethod()),
		"policy name": WithPolicyName("x"),
		"bad cost":    WithCost(0),
	} {
		if _, err := NewRouteMiddleware(rt, opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("NewRouteMiddleware with %s: %v, want ErrInvalidOption", name, err)
		}
	}
}

// TestMatchPatternLegacyMux runs itself again with the Go 1.21 ServeMux
// rules switched on: patterns then mean something else, so MatchPattern
// and NewRoutes must refuse to build rather than never match.
func TestMatchPatternLegacyMux(t *testing.T) {
	if os.Getenv("FLOODGATE_LEGACY_MUX_CHILD") == "1" {
		if _, err := MatchPattern("GET /x"); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("MatchPattern under httpmuxgo121=1: %v, want ErrInvalidOption", err)
		}
		if _, err := NewRoutes(Route{Pattern: "/x", Policies: []Policy{{Name: "p", Limiter: &recLimiter{}, Key: KeyByMethod()}}}); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("NewRoutes under httpmuxgo121=1: %v, want ErrInvalidOption", err)
		}
		return
	}
	if testing.Short() {
		t.Skip("starts a child test process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMatchPatternLegacyMux$", "-test.v")
	cmd.Env = append(os.Environ(), "FLOODGATE_LEGACY_MUX_CHILD=1", "GODEBUG=httpmuxgo121=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestMatchPatternLegacyMux") {
		t.Fatalf("child under GODEBUG=httpmuxgo121=1: %v\n%s", err, out)
	}
}

// BenchmarkRouteMatch compares the cost of asking a private ServeMux
// (MatchPattern, NewRoutes) with the literal comparison of MatchRoute.
func BenchmarkRouteMatch(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/auth/available/user_id?userId=a", nil)
	pattern, err := MatchPattern("GET /auth/available/user_id")
	if err != nil {
		b.Fatal(err)
	}
	p := []Policy{{Name: "p", Limiter: &recLimiter{}, Key: KeyByMethod()}}
	rt, err := NewRoutes(
		Route{Pattern: "GET /auth/available/user_id", Policies: p},
		Route{Pattern: "POST /signup", Policies: p},
		Route{Pattern: "GET /users/{id}", Policies: p},
		Route{Pattern: "/", Policies: p},
	)
	if err != nil {
		b.Fatal(err)
	}
	for name, match := range map[string]func(*http.Request) bool{
		"MatchRoute":   MatchRoute(http.MethodGet, "/auth/available/user_id"),
		"MatchPattern": pattern,
		"Routes4":      func(r *http.Request) bool { _, ok := rt.Match(r); return ok },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if !match(r) {
					b.Fatal("no match")
				}
			}
		})
	}
}

// TestRouteConflictNamesPatterns: two routes ServeMux cannot hold together
// are reported by their patterns and ServeMux's reason, not by the file
// and line of floodgate's own call to ServeMux.Handle (issue 24 item 6).
func TestRouteConflictNamesPatterns(t *testing.T) {
	p := []Policy{{Name: "p", Limiter: &recLimiter{}, Key: KeyByMethod()}}
	for name, c := range map[string]struct {
		first, second string
		reason        string
	}{
		"duplicate":   {"GET /x", "GET /x", "matches the same requests"},
		"spaced":      {"GET /x/{id}", "GET  /x/{name}", "matches the same requests"},
		"conflicting": {"/users/{id}/posts", "/users/me/{tab}", "/users/me/posts"},
	} {
		_, err := NewRoutes(
			Route{Pattern: "GET /other", Policies: p},
			Route{Pattern: c.first, Policies: p},
			Route{Pattern: c.second, Policies: p},
		)
		msg := fmt.Sprint(err)
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(msg, fmt.Sprintf("route %q", c.second)) ||
			!strings.Contains(msg, fmt.Sprintf("conflicts with route %q", c.first)) || !strings.Contains(msg, c.reason) {
			t.Errorf("%s: %v; want ErrInvalidOption naming both patterns and why", name, err)
		}
		if strings.Contains(msg, ".go:") || strings.Contains(msg, "registered at") {
			t.Errorf("%s: %q names a source file", name, msg)
		}
	}
	_, err := NewRoutes(Route{Pattern: "GET /x/{", Policies: p})
	if msg := fmt.Sprint(err); !strings.HasPrefix(msg, `route "GET /x/{": floodgate: invalid option: `) || strings.Contains(msg, ".go:") {
		t.Errorf("invalid pattern: %q", msg)
	}
}
