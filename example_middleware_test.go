package floodgate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The username-availability probe: 10 requests per 10 minutes per client
// IP on GET /auth/available/user_id only, denied with the service's own
// JSON envelope. A fake clock stands in for time passing.
func ExampleMiddleware() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	probe, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 10, Period: 10 * time.Minute},
		floodgate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	envelope, err := floodgate.StaticJSON([]byte(`{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}`))
	if err != nil {
		panic(err)
	}
	limit := floodgate.Middleware(probe,
		floodgate.WithOnly(floodgate.MatchRoute(http.MethodGet, "/auth/available/user_id")),
		floodgate.WithDeniedHandler(envelope),
	)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/available/user_id", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, `{"resultCode":"OK","data":true}`)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	handler := limit(mux) // outermost: a refused probe costs nothing more

	get := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "203.0.113.7:51234"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}

	for i := 1; i <= 10; i++ {
		get("/auth/available/user_id?userId=alice")
	}
	w := get("/auth/available/user_id?userId=bob")
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", w.Header().Get("RateLimit"))
	fmt.Println(w.Body.String())

	fmt.Println("health check:", get("/healthz").Code)

	now = now.Add(time.Minute) // one token back
	w = get("/auth/available/user_id?userId=bob")
	fmt.Println(w.Code, "RateLimit:", w.Header().Get("RateLimit"))
	// Output:
	// 429 Retry-After: 60
	// RateLimit-Policy: "default";q=10;w=600
	// RateLimit: "default";r=0;t=60
	// {"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}
	// health check: 200
	// 200 RateLimit: "default";r=0;t=600
}

// Sign-up abuse: limit by the nickname pattern (abc1, abc2 … → abc{NUM}),
// 5 per minute, and fall back to the client IP with a more lenient limit
// when no pattern can be formed. The selected policy names itself in the
// RateLimit headers.
func ExampleNewPolicyMiddleware() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	byNickname, err := floodgate.NewSlidingLog(floodgate.PerMinute(5), floodgate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	byIP, err := floodgate.NewSlidingLog(floodgate.PerMinute(20), floodgate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		panic(err)
	}
	nickname, err := floodgate.KeyByJSONField("nickname", 4<<10)
	if err != nil {
		panic(err)
	}
	nicknamePattern, err := floodgate.KeyByPattern(nickname)
	if err != nil {
		panic(err)
	}
	policies, err := floodgate.NewPolicySelector(
		floodgate.Policy{Name: "nickname", Limiter: byNickname, Key: nicknamePattern},
		floodgate.Policy{Name: "ip", Limiter: byIP, Key: clientIP},
	)
	if err != nil {
		panic(err)
	}
	limit, err := floodgate.NewPolicyMiddleware(policies)
	if err != nil {
		panic(err)
	}
	signup := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated) // the body is still there to decode
	}))

	post := func(nickname string) {
		r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(`{"nickname":"`+nickname+`"}`))
		r.RemoteAddr = "198.51.100.4:40000"
		w := httptest.NewRecorder()
		signup.ServeHTTP(w, r)
		fmt.Printf("%-6s %d %s\n", nickname, w.Code, w.Header().Get("RateLimit"))
	}
	for _, nick := range []string{"abc1", "abc2", "abc3", "abc4", "abc5", "abc6", "xyz1", "jo"} {
		post(nick)
	}
	// Output:
	// abc1   201 "nickname";r=4;t=60
	// abc2   201 "nickname";r=3;t=60
	// abc3   201 "nickname";r=2;t=60
	// abc4   201 "nickname";r=1;t=60
	// abc5   201 "nickname";r=0;t=60
	// abc6   429 "nickname";r=0;t=60
	// xyz1   201 "nickname";r=4;t=60
	// jo     201 "ip";r=19;t=60
}
