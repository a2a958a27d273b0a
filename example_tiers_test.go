package floodgate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Tiers: each customer's API key is limited at the rate of its plan, free
// 3 per minute and pro 10 per minute, and requests without a known key at
// 2 per minute per client IP. One policy per plan, in a PolicySelector:
// a plan's key function yields the API key only for keys on that plan
// (floodgate.ErrNoKey otherwise, so the next plan is tried), and the plan
// names itself in the RateLimit headers. An unknown or missing key falls
// through to the anonymous policy, so guessing keys buys nothing.
func Example_tiers() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	// The plan of each API key, as the service's account store knows it
	// (look it up in a cache: each plan's key function asks).
	planOf := map[string]string{"key-ann": "free", "key-bob": "pro"}
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		panic(err)
	}
	onPlan := func(plan string) floodgate.KeyFunc {
		return func(r *http.Request) (string, error) {
			key, err := apiKey(r)
			if err != nil {
				return "", err // no key: ErrNoKey, the next policy applies
			}
			if planOf[key] != plan {
				return "", fmt.Errorf("%w: key not on the %s plan", floodgate.ErrNoKey, plan)
			}
			return key, nil
		}
	}
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		panic(err)
	}

	policies := []floodgate.Policy{
		{Name: "free", Key: onPlan("free")},
		{Name: "pro", Key: onPlan("pro")},
		{Name: "anonymous", Key: clientIP},
	}
	for i, rate := range []floodgate.Rate{floodgate.PerMinute(3), floodgate.PerMinute(10), floodgate.PerMinute(2)} {
		lim, err := floodgate.NewTokenBucket(rate, floodgate.WithClock(clock))
		if err != nil {
			panic(err)
		}
		policies[i].Limiter = lim
	}
	plans, err := floodgate.NewPolicySelector(policies...)
	if err != nil {
		panic(err)
	}
	limit, err := floodgate.NewPolicyMiddleware(plans)
	if err != nil {
		panic(err)
	}
	api := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	call := func(key string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/report", nil)
		r.RemoteAddr = "198.51.100.4:40000"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Printf("%-9s %d %s %s\n", key, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	for range 4 {
		call("key-ann")
	}
	call("key-bob")
	call("key-eve") // unknown: anonymous, by IP
	call("")
	call("")
	// Output:
	// key-ann   200 "free";q=3;w=60 "free";r=2;t=20
	// key-ann   200 "free";q=3;w=60 "free";r=1;t=40
	// key-ann   200 "free";q=3;w=60 "free";r=0;t=60
	// key-ann   429 "free";q=3;w=60 "free";r=0;t=20
	// key-bob   200 "pro";q=10;w=60 "pro";r=9;t=6
	// key-eve   200 "anonymous";q=2;w=60 "anonymous";r=1;t=30
	//           200 "anonymous";q=2;w=60 "anonymous";r=0;t=60
	//           429 "anonymous";q=2;w=60 "anonymous";r=0;t=30
}
