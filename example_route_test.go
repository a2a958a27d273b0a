package floodgate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Per-route limits in one middleware, matched by ServeMux's own rules: the
// username probe 3 per 10 minutes by client IP (HEAD counts with GET),
// sign-ups 2 per minute, and everything else 100 per minute by IP through
// the "/" route.
func ExampleNewRouteMiddleware() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	bucket := func(r floodgate.Rate) *floodgate.TokenBucket {
		b, err := floodgate.NewTokenBucket(r, floodgate.WithClock(clock))
		if err != nil {
			panic(err)
		}
		return b
	}
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		panic(err)
	}
	routes, err := floodgate.NewRoutes(
		floodgate.Route{Pattern: "GET /auth/available/user_id", Policies: []floodgate.Policy{
			{Name: "probe", Limiter: bucket(floodgate.Rate{Limit: 3, Period: 10 * time.Minute}), Key: clientIP}}},
		floodgate.Route{Pattern: "POST /signup", Policies: []floodgate.Policy{
			{Name: "signup", Limiter: bucket(floodgate.PerMinute(2)), Key: clientIP}}},
		floodgate.Route{Pattern: "/", Policies: []floodgate.Policy{
			{Name: "default", Limiter: bucket(floodgate.PerMinute(100)), Key: clientIP}}},
	)
	if err != nil {
		panic(err)
	}
	limit, err := floodgate.NewRouteMiddleware(routes)
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/available/user_id", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /signup", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("GET /", func(http.ResponseWriter, *http.Request) {})
	handler := limit(mux)

	do := func(method, path string) {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "203.0.113.7:51234"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("%-4s %-39s %d %s\n", method, path, w.Code, w.Header().Get("RateLimit"))
	}
	do("GET", "/auth/available/user_id?userId=ann")
	do("HEAD", "/auth/available/user_id?userId=bob")
	do("GET", "/auth/available/%75ser_id?userId=cy") // the mux unescapes: same route
	do("HEAD", "/auth/available/user_id?userId=dan")
	do("POST", "/signup")
	do("GET", "/docs")
	// Output:
	// GET  /auth/available/user_id?userId=ann      200 "probe";r=2;t=200
	// HEAD /auth/available/user_id?userId=bob      200 "probe";r=1;t=400
	// GET  /auth/available/%75ser_id?userId=cy     200 "probe";r=0;t=600
	// HEAD /auth/available/user_id?userId=dan      429 "probe";r=0;t=200
	// POST /signup                                 201 "signup";r=1;t=30
	// GET  /docs                                   200 "default";r=99;t=1
}
