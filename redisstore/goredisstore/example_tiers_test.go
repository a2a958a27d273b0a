package goredisstore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/redis/go-redis/v9"
)

// Tiers on Redis: the same PolicySelector as the in-memory tiers example
// (one policy per plan, keyed by the API key when it is on that plan,
// then an anonymous policy by client IP), with one Redis limiter per plan,
// each under its own prefix, so every instance of the service shares each
// customer's quota.
func Example_tiers() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()
	store := goredisstore.New(rdb)
	run := time.Now().Format("150405.000000") // fresh keys for each run of the example

	planOf := map[string]string{"key-ann": "free", "key-bob": "pro"}
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		panic(err)
	}
	onPlan := func(plan string) floodgate.KeyFunc {
		return func(r *http.Request) (string, error) {
			key, err := apiKey(r)
			if err != nil {
				return "", err
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
		lim, err := redisstore.NewTokenBucket(store, rate,
			redisstore.WithPrefix("example:tiers:"+run+":"+policies[i].Name))
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
		fmt.Printf("%-9s %d %s\n", key, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	for range 4 {
		call("key-ann")
	}
	call("key-bob")
	call("key-eve")
	call("")
	call("")
	// Output:
	// key-ann   200 "free";q=3;w=60
	// key-ann   200 "free";q=3;w=60
	// key-ann   200 "free";q=3;w=60
	// key-ann   429 "free";q=3;w=60
	// key-bob   200 "pro";q=10;w=60
	// key-eve   200 "anonymous";q=2;w=60
	//           200 "anonymous";q=2;w=60
	//           429 "anonymous";q=2;w=60
}
