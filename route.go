package floodgate

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// MatchRoute returns a predicate, for WithOnly or WithSkip, that matches
// requests with this method and exactly this URL path (the decoded
// Request.URL.Path, so percent-encoded spellings of the path match too).
//
// A GET route also matches HEAD requests, because ServeMux routes HEAD to
// a GET pattern: a HEAD probe runs the same handler (and its
// Content-Length can tell as much as the body), so it counts toward the
// same quota. To limit HEAD apart from GET, route it to its own pattern
// and use NewRoutes.
//
// MatchRoute compares paths literally; MatchPattern, which asks a ServeMux,
// is the safer choice for anything but a fixed path.
func MatchRoute(method, path string) func(r *http.Request) bool {
	withHead := method == http.MethodGet
	return func(r *http.Request) bool {
		return r.URL.Path == path && (r.Method == method || withHead && r.Method == http.MethodHead)
	}
}

// MatchPattern returns a predicate, for WithOnly or WithSkip, that matches
// exactly the requests an http.ServeMux would route to pattern, by asking
// a private ServeMux that holds only pattern. It follows every rule of
// ServeMux patterns (Go 1.22): a method ("GET /x" also matches HEAD), a
// host ("api.example.com/x"), wildcards ("/users/{id}", "/files/{path...}"),
// {$} and trailing-slash subtrees, and the mux's cleaning of paths: a
// request the mux would answer with a redirect (to the clean path, or from
// "/dir" to "/dir/"), with 404 or with 405 does not match, since the
// handler behind the pattern does not run for it.
//
// Only pattern is known to the private mux. If the application's mux
// holds a more specific pattern that wins over pattern for some requests
// ("GET /api/health" beside "GET /api/"), those requests still match
// here; list both in NewRoutes for the table to follow the same
// precedence.
//
// An invalid pattern (one http.ServeMux.Handle would panic on) is an error
// wrapping ErrInvalidOption, as is a process whose ServeMux runs the Go
// 1.21 rules (GODEBUG httpmuxgo121=1), under which patterns with methods
// or wildcards never match and the limit would silently not apply.
func MatchPattern(pattern string) (func(r *http.Request) bool, error) {
	mux, err := newRouteMux()
	if err != nil {
		return nil, err
	}
	if err := handlePattern(mux, pattern, routeMark(0)); err != nil {
		return nil, err
	}
	return func(r *http.Request) bool {
		_, ok := routeOf(mux, r)
		return ok
	}, nil
}

// Route is one rule of a per-route table (NewRoutes): the requests a
// ServeMux would route to Pattern are limited by Policies.
type Route struct {
	// Pattern is an http.ServeMux pattern, e.g.
	// "GET /auth/available/user_id", "POST /signup" or "api.example.com/".
	// The pattern "/" matches every request no other route takes: it is
	// the table's default policy.
	Pattern string
	// Policies limit the requests routed to Pattern, tried in order as by
	// a PolicySelector: the first whose key function yields a key decides.
	// At least one is required.
	Policies []Policy
}

// Routes is a table of per-route limits for one middleware
// (NewRouteMiddleware): each request is limited by the policies of the
// route a ServeMux holding all the table's patterns would route it to, so
// the rule that applies is the route that runs. ServeMux's own rules
// choose: the most specific pattern wins, a GET pattern takes HEAD
// requests (unless a HEAD pattern exists), a host pattern wins over a
// host-less one that is no more specific, and paths are cleaned. A request that no route matches,
// or that the mux would redirect or answer with 404 or 405, is not
// limited; add a route for "/" to limit those by a default policy.
//
// For example, 10 probes per 10 minutes by client IP on the username
// check, 5 sign-ups per minute by nickname pattern (else by IP), and 600
// requests per minute by IP on everything else:
//
//	routes, err := floodgate.NewRoutes(
//		floodgate.Route{Pattern: "GET /auth/available/user_id", Policies: []floodgate.Policy{{Name: "probe", Limiter: probes, Key: clientIP}}},
//		floodgate.Route{Pattern: "POST /signup", Policies: []floodgate.Policy{{Name: "nickname", Limiter: byNickname, Key: nickname}, {Name: "signup-ip", Limiter: bySignupIP, Key: clientIP}}},
//		floodgate.Route{Pattern: "/", Policies: []floodgate.Policy{{Name: "default", Limiter: general, Key: clientIP}}},
//	)
//
// A Routes is immutable and safe for concurrent use. Matching costs one
// ServeMux lookup per request.
type Routes struct {
	mux       *http.ServeMux
	patterns  []string
	selectors []*PolicySelector
}

// routeMark is the handler registered for the i-th route of a private mux:
// the mux's answer names the route instead of running anything.
type routeMark int

// ServeHTTP is never called: the private mux is only asked which handler
// it would run.
func (routeMark) ServeHTTP(http.ResponseWriter, *http.Request) {}

// NewRoutes builds a route table. Each route needs a valid pattern and at
// least one valid Policy (see NewPolicySelector); an invalid pattern, two
// routes with the same pattern or with patterns that ServeMux refuses to
// hold together (neither more specific than the other, such as
// "/users/{id}/posts" and "/users/me/{tab}") are errors wrapping
// ErrInvalidOption.
//
// A limiter may serve the policies of several routes only if they have
// the same name, which says they key requests the same way: one per-IP
// budget over several routes is fine, while a limiter shared by a "user"
// policy of one route and an "ip" policy of another would count a user
// named like an address against that address, and is refused. Two
// limiters that report the same Namespace (two Redis limiters with one
// key prefix) count as one limiter here.
func NewRoutes(routes ...Route) (*Routes, error) {
	if len(routes) == 0 {
		return nil, fmt.Errorf("%w: no routes", ErrInvalidOption)
	}
	mux, err := newRouteMux()
	if err != nil {
		return nil, err
	}
	rt := &Routes{mux: mux}
	owners := limiterOwners{}
	for i, route := range routes {
		if len(route.Policies) == 0 {
			return nil, fmt.Errorf("route %q: %w: no policy", route.Pattern, ErrInvalidOption)
		}
		sel, err := NewPolicySelector(route.Policies...)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", route.Pattern, err)
		}
		for _, p := range route.Policies {
			if err := owners.claim(p.Name, p.Limiter, route.Pattern); err != nil {
				return nil, fmt.Errorf("route %q: %w", route.Pattern, err)
			}
		}
		if err := handlePattern(mux, route.Pattern, routeMark(i)); err != nil {
			return nil, routeConflict(rt.patterns, route.Pattern, err)
		}
		rt.patterns = append(rt.patterns, route.Pattern)
		rt.selectors = append(rt.selectors, sel)
	}
	return rt, nil
}

// Match returns the pattern of the route that limits r, and false if no
// route does (r is then not limited).
func (rt *Routes) Match(r *http.Request) (pattern string, ok bool) {
	i, ok := routeOf(rt.mux, r)
	if !ok {
		return "", false
	}
	return rt.patterns[i], true
}

// NewRouteMiddleware returns a middleware that limits each request by the
// route of rt it is routed to (see Routes), and passes requests no route
// matches to the handler untouched. It takes the options of
// NewPolicyMiddleware, which apply to every route; each route keeps its
// own denial-log and error-log pacing (WithLogger). Invalid options are
// errors wrapping ErrInvalidOption, as there.
func NewRouteMiddleware(rt *Routes, opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	if rt == nil {
		return nil, fmt.Errorf("%w: nil routes", ErrInvalidOption)
	}
	mws := make([]func(http.Handler) http.Handler, len(rt.selectors))
	for i, sel := range rt.selectors {
		mw, err := NewPolicyMiddleware(sel, opts...)
		if err != nil {
			return nil, err
		}
		mws[i] = mw
	}
	return func(next http.Handler) http.Handler {
		limited := make([]http.Handler, len(mws))
		for i, mw := range mws {
			limited[i] = mw(next)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if i, ok := routeOf(rt.mux, r); ok {
				limited[i].ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// routeOf returns the index of the route mux would run for r. Redirects,
// 404 and 405 answers come back as the mux's own handlers, not as a
// routeMark: no route runs for those requests.
func routeOf(mux *http.ServeMux, r *http.Request) (int, bool) {
	h, _ := mux.Handler(r)
	i, ok := h.(routeMark)
	return int(i), ok
}

// handlePattern registers h for pattern on mux, turning ServeMux's panic
// on an invalid or conflicting pattern into an error.
func handlePattern(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("route %q: %w: %s", pattern, ErrInvalidOption, muxReason(p))
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// routeConflict returns the error for a pattern that ServeMux refused
// (err) after the patterns before it: the earlier route it conflicts
// with, by pattern, if there is one, else err. Each earlier pattern is
// tried alone against it, on a mux of its own: only a refused table pays.
func routeConflict(before []string, pattern string, err error) error {
	for _, q := range before {
		mux := http.NewServeMux()
		mux.Handle(q, routeMark(0))
		if cerr := handlePattern(mux, pattern, routeMark(1)); cerr != nil {
			_, why, _ := strings.Cut(cerr.Error(), ErrInvalidOption.Error()+": ")
			return fmt.Errorf("route %q: %w: conflicts with route %q: %s", pattern, ErrInvalidOption, q, why)
		}
	}
	return err
}

// muxReason returns the text of a ServeMux registration panic without
// the file and line of each registration, which would name floodgate's
// own call to Handle, not the caller's route: for a conflict, ServeMux's
// explanation only, on one line.
func muxReason(p any) string {
	s := fmt.Sprint(p)
	if head, why, ok := strings.Cut(s, "\n"); ok && strings.Contains(head, "registered at") {
		return strings.Join(strings.Fields(why), " ")
	}
	if strings.Contains(s, "registered at") {
		return "it conflicts with another route"
	}
	return s
}

// newRouteMux returns an empty private mux, or an error if ServeMux runs
// the Go 1.21 rules in this process.
func newRouteMux() (*http.ServeMux, error) {
	if legacyMux() {
		return nil, fmt.Errorf("%w: http.ServeMux runs the Go 1.21 rules (GODEBUG httpmuxgo121=1), which do not understand methods, hosts with paths, or wildcards in patterns", ErrInvalidOption)
	}
	return http.NewServeMux(), nil
}

// legacyMux reports whether ServeMux runs the Go 1.21 rules (a process
// setting, fixed at start-up): a method pattern then matches nothing.
var legacyMux = sync.OnceValue(func() bool {
	mux := http.NewServeMux()
	mux.Handle("GET /{x}", routeMark(0))
	r, err := http.NewRequest(http.MethodGet, "/probe", nil)
	if err != nil {
		return false // a constant request: cannot fail
	}
	_, ok := routeOf(mux, r)
	return !ok
})
