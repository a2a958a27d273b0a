package floodgate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// TestSetRateHeaders: the RateLimit-Policy and RateLimit fields show the
// new quota and window from the first decision after SetRate, for every
// in-memory limiter behind the middleware. 10 per 10 minutes, 4 spent,
// then 30 a minute (KeepUsed): q=30, w=60, and 30−4−1 left. Before the
// fix the window stayed the constructor's (w=600), a header that lied.
func TestSetRateHeaders(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	for name, build := range changeableKinds(clock.Now) {
		t.Run(name, func(t *testing.T) {
			lim, err := build(floodgate.Rate{Limit: 10, Period: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			h := headerHandler(t, lim)
			for i := range 4 {
				if got, want := h(), `200 "default";q=10;w=600 "default";r=`+strconv.Itoa(9-i); got[:len(want)] != want {
					t.Fatalf("request %d: %s, want %s…", i, got, want)
				}
			}
			if err := lim.SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerMinute(30)}); err != nil {
				t.Fatal(err)
			}
			if got, want := h(), `200 "default";q=30;w=60 "default";r=25`; got[:len(want)] != want {
				t.Fatalf("after SetRate: %s, want %s…", got, want)
			}
		})
	}
}

// headerHandler returns a function that sends one request through the
// middleware over lim and reports "status RateLimit-Policy RateLimit".
func headerHandler(t *testing.T, lim floodgate.Limiter) func() string {
	t.Helper()
	limit, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }))
	if err != nil {
		t.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	return func() string {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return strconv.Itoa(w.Code) + " " + w.Header().Get("RateLimit-Policy") + " " + w.Header().Get("RateLimit")
	}
}

// TestPlanHeaders: behind the middleware, each key's headers show its own
// plan's quota and window, and a plan changed in the database shows from
// the key's first decision after its cache entry expired.
func TestPlanHeaders(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	hourly := floodgate.Plan{Name: "hourly", Rate: floodgate.Rate{Limit: 100, Period: time.Hour}}
	book := newPlanBook(map[string]floodgate.Plan{"ann": freePlan, "bob": hourly})
	plans := newPlans(t, book, clock, floodgate.KeepUsed, "TokenBucket")
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := floodgate.NewMiddleware(plans, floodgate.WithKeyFunc(apiKey))
	if err != nil {
		t.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func(key string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return strconv.Itoa(w.Code) + " " + w.Header().Get("RateLimit-Policy") + " " + w.Header().Get("RateLimit")
	}
	steps := []struct{ key, want string }{
		{"ann", `200 "default";q=3;w=60 "default";r=2;t=20`},
		{"bob", `200 "default";q=100;w=3600 "default";r=99;t=36`},
		{"ann", `200 "default";q=3;w=60 "default";r=1;t=40`},
	}
	for i, s := range steps {
		if got := call(s.key); got != s.want {
			t.Errorf("step %d (%s): %s, want %s", i, s.key, got, s.want)
		}
	}
	book.set("ann", proPlan)
	clock.Advance(time.Second) // the cache's time: ann's plan is looked up again
	if got, want := call("ann"), `200 "default";q=12;w=60 "default";r=9;t=15`; got != want {
		t.Errorf("ann upgraded: %s, want %s", got, want)
	}
}
