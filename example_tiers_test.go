package floodgate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Tiers: each customer's API key is limited at the rate of its plan, free
// 3 per minute and pro 10 per minute, which a PlanLimiter looks up in the
// account store and caches; requests without a known key are limited at
// 2 per minute per client IP. KnownKey makes an unknown or missing key
// fall through to the anonymous policy, so guessing keys buys nothing.
// Each response carries the key's own quota. Ann upgrades to pro while
// she is limited: within the cache's 10 s her requests are pro's, with
// what she spent still spent (KeepUsed).
func Example_tiers() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	free := floodgate.Plan{Name: "free", Rate: floodgate.PerMinute(3)}
	pro := floodgate.Plan{Name: "pro", Rate: floodgate.PerMinute(10)}
	var mu sync.Mutex
	accounts := map[string]floodgate.Plan{"key-ann": free, "key-bob": pro} // the account store
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
		Resolve: func(_ context.Context, key string) (floodgate.Plan, error) {
			mu.Lock()
			defer mu.Unlock()
			plan, ok := accounts[key]
			if !ok {
				return floodgate.Plan{}, floodgate.ErrNoPlan
			}
			return plan, nil
		},
		New:      floodgate.TokenBucketPlans(floodgate.WithClock(clock)),
		CacheTTL: 10 * time.Second, // a plan change reaches its key within 10 s
		Clock:    clock,
	})
	if err != nil {
		panic(err)
	}
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		panic(err)
	}
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		panic(err)
	}
	anonymous, err := floodgate.NewTokenBucket(floodgate.PerMinute(2), floodgate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	sel, err := floodgate.NewPolicySelector(
		floodgate.Policy{Name: "customer", Limiter: plans, Key: plans.KnownKey(apiKey)},
		floodgate.Policy{Name: "anonymous", Limiter: anonymous, Key: clientIP},
	)
	if err != nil {
		panic(err)
	}
	limit, err := floodgate.NewPolicyMiddleware(sel)
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

	mu.Lock()
	accounts["key-ann"] = pro // Ann upgrades while limited
	mu.Unlock()
	now = now.Add(10 * time.Second)
	call("key-ann")
	// Output:
	// key-ann   200 "customer";q=3;w=60 "customer";r=2;t=20
	// key-ann   200 "customer";q=3;w=60 "customer";r=1;t=40
	// key-ann   200 "customer";q=3;w=60 "customer";r=0;t=60
	// key-ann   429 "customer";q=3;w=60 "customer";r=0;t=20
	// key-bob   200 "customer";q=10;w=60 "customer";r=9;t=6
	// key-eve   200 "anonymous";q=2;w=60 "anonymous";r=1;t=30
	//           200 "anonymous";q=2;w=60 "anonymous";r=0;t=60
	//           429 "anonymous";q=2;w=60 "anonymous";r=0;t=30
	// key-ann   200 "customer";q=10;w=60 "customer";r=6;t=21
}
