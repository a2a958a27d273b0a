package goredisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/redis/go-redis/v9"
)

// Tiers on Redis: the same PlanLimiter as the in-memory tiers example,
// with each plan's limiter on Redis, every plan on one prefix, so every
// instance of the service shares each customer's quota and a key keeps
// its state when its plan changes. As in memory, what Ann spent stays
// spent (PlanConfig.Inherit, KeepUsed by default): she spent her 3 and
// got half a unit back, so after her upgrade she has pro's 10 less 2.5,
// and the answers are the in-memory example's.
func Example_tiers() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()
	store := goredisstore.New(rdb)
	prefix := "example:tiers:" + time.Now().Format("150405.000000") // fresh keys for each run
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
		New: func(p floodgate.Plan) (floodgate.Limiter, error) {
			return redisstore.NewTokenBucket(store, p.Rate, redisstore.WithPrefix(prefix+":customer"), redisstore.WithClock(clock))
		},
		CacheTTL: 10 * time.Second,
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
	anonymous, err := redisstore.NewTokenBucket(store, floodgate.PerMinute(2),
		redisstore.WithPrefix(prefix+":anonymous"), redisstore.WithClock(clock))
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
	call("key-eve")
	call("")
	call("")

	mu.Lock()
	accounts["key-ann"] = pro // Ann upgrades while limited
	mu.Unlock()
	now = now.Add(10 * time.Second)
	call("key-ann")
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
	// key-ann   200 "customer";q=10;w=60 "customer";r=5;t=27
}
