package floodgate_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// limitTokens charges each completion request the tokens its model
// spent, known only once it has answered: 10,000 tokens a minute per API
// key. A request needs its estimate of 100 tokens to start; a key that
// spent more than it had owes the rest, and waits until it is paid.
func limitTokens(next http.Handler) (http.Handler, error) {
	perKey, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 10_000, Period: time.Minute})
	if err != nil {
		return nil, err
	}
	apiKey, err := floodgate.KeyByHeader("X-Api-Key")
	if err != nil {
		return nil, err
	}
	limit, err := floodgate.NewMiddleware(perKey,
		floodgate.WithKeyFunc(apiKey),
		floodgate.WithCost(100),                         // the estimate, reserved up front
		floodgate.WithCostAfter(floodgate.CostReported), // then what the handler reports
	)
	if err != nil {
		return nil, err
	}
	return limit(next), nil
}

// Charge the cost known after the response: a completion that spent
// 12,000 tokens leaves its key 2,000 in debt, so the next request waits
// for those and its own 100 — 12.6 s at 10,000 a minute.
func ExampleWithCostAfter() {
	handler, err := limitTokens(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := 12_000 // what the model says it spent
		if err := floodgate.ReportCost(r.Context(), used); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "…the completion…")
	}))
	if err != nil {
		panic(err)
	}
	complete := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
		r.Header.Set("X-Api-Key", "key-1")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}
	fmt.Println("first:", complete().Code)
	w := complete()
	fmt.Println("second:", w.Code, "Retry-After:", w.Header().Get("Retry-After"), "RateLimit:", w.Header().Get("RateLimit"))
	// Output:
	// first: 200
	// second: 429 Retry-After: 13 RateLimit: "default";r=0;t=13
}

// limitConcurrency lets each API key run 2 requests at once, and the
// whole service 100: a key over its share gets 429, everyone gets 503
// when the service is full. Slots are released when the handler returns,
// also when it panics or its client hangs up.
func limitConcurrency(next http.Handler) (http.Handler, error) {
	apiKey, err := floodgate.KeyByHeader("X-Api-Key")
	if err != nil {
		return nil, err
	}
	perKey, err := floodgate.NewInFlight(2)
	if err != nil {
		return nil, err
	}
	service, err := floodgate.NewServiceInFlight(100)
	if err != nil {
		return nil, err
	}
	perKeyLimit, err := floodgate.NewMiddleware(perKey, floodgate.WithKeyFunc(apiKey))
	if err != nil {
		return nil, err
	}
	serviceLimit, err := floodgate.NewMiddleware(service) // no key needed
	if err != nil {
		return nil, err
	}
	return serviceLimit(perKeyLimit(next)), nil
}

// Limit the requests in flight: the third concurrent request of one key
// is refused while two are in the handler; another key is not; once they
// are done, the key's next request gets in.
func ExampleNewInFlight() {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	handler, err := limitConcurrency(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	}))
	if err != nil {
		panic(err)
	}
	call := func(key, path string) int {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w.Code
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); call("key-1", "/slow") }()
	}
	<-entered
	<-entered
	fmt.Println("key-1, third at once:", call("key-1", "/"))
	fmt.Println("key-2:", call("key-2", "/"))
	close(release)
	wg.Wait()
	fmt.Println("key-1, once they are done:", call("key-1", "/"))
	// Output:
	// key-1, third at once: 429
	// key-2: 200
	// key-1, once they are done: 200
}

// Wait for a turn instead of being refused, as nginx's limit_req with
// burst and delay does: 10 per second, a burst of 10, and a request
// whose turn comes within a second is held until then. Here the limiter
// and the wait share a test clock that jumps ahead when a request waits,
// so that the example runs in no time; in a service, leave the timer out.
func ExampleWithWait() {
	clock := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	perClient, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	sleep := func(d time.Duration) (<-chan time.Time, func() bool) { // the test clock's sleep: it jumps
		clock.Advance(d)
		return clock.After(0)
	}
	limit, err := floodgate.NewMiddleware(perClient,
		floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, PerKey: 10, Total: 1000}),
		floodgate.WithWaitTimer(sleep),
	)
	if err != nil {
		panic(err)
	}
	start := clock.Now()
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("%s served at +%v\n", r.URL.Path, clock.Now().Sub(start))
	}))
	for i := 1; i <= 12; i++ {
		r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/%d", i), nil)
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// /1 served at +0s
	// /2 served at +0s
	// /3 served at +0s
	// /4 served at +0s
	// /5 served at +0s
	// /6 served at +0s
	// /7 served at +0s
	// /8 served at +0s
	// /9 served at +0s
	// /10 served at +0s
	// /11 served at +100ms
	// /12 served at +200ms
}
