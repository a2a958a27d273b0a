package metricstest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// OutcomePolicies are the policies DriveOutcomes decides under.
var OutcomePolicies = []string{"probe", "trial", "broken", "heavy", "login"}

// DriveOutcomes runs real middlewares, one a policy of OutcomePolicies,
// each reporting to hook, and fails t unless every response is as
// expected. The counts an adapter must then report, by policy:
//
//   - probe: 3 allowed, 2 denied, 4 skipped (its skip predicate, wrapped
//     by the adapter's skip, exempts /healthz);
//   - trial (dry-run): 1 allowed, 2 dry-run denied;
//   - broken (the store is down): 1 error;
//   - heavy (a cost of 5 that can never fit 2): 1 denied;
//   - login (WithCountStatus, two events a request): 2 allowed;
//
// and zero for every other outcome.
func DriveOutcomes(t *testing.T, hook func(floodgate.DecisionEvent), skip func(policy string, pred func(*http.Request) bool) func(*http.Request) bool) {
	t.Helper()
	clk := floodgatetest.NewClock(T0)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mw := func(l floodgate.Limiter, opts ...floodgate.MiddlewareOption) http.Handler {
		h, err := floodgate.NewMiddleware(l, append(opts, floodgate.WithDecisionHook(hook))...)
		if err != nil {
			t.Fatal(err)
		}
		return h(ok)
	}
	probe := mw(NewBucket(t, floodgate.PerMinute(3), clk), floodgate.WithPolicyName("probe"),
		floodgate.WithSkip(skip("probe", func(r *http.Request) bool { return r.URL.Path == "/healthz" })))
	trial := mw(NewBucket(t, floodgate.PerMinute(1), clk), floodgate.WithPolicyName("trial"), floodgate.WithDryRun())
	broken := mw(Failing{}, floodgate.WithPolicyName("broken"))
	heavy := mw(NewBucket(t, floodgate.PerMinute(2), clk), floodgate.WithPolicyName("heavy"), floodgate.WithCostFunc(func(*http.Request) (int, error) { return 5, nil }))
	login := mw(NewBucket(t, floodgate.PerMinute(5), clk), floodgate.WithPolicyName("login"),
		floodgate.WithCountStatus(func(int) bool { return true }))

	for i, s := range []struct {
		h      http.Handler
		path   string
		n      int
		status int
	}{
		{probe, "/", 3, http.StatusNoContent},
		{probe, "/", 2, http.StatusTooManyRequests},
		{probe, "/healthz", 4, http.StatusNoContent},
		{trial, "/", 1, http.StatusNoContent},
		{trial, "/", 2, http.StatusNoContent}, // dry run: denied, let through
		{broken, "/", 1, http.StatusServiceUnavailable},
		{heavy, "/", 1, http.StatusTooManyRequests}, // a cost func asks 5 > 2: never fits
		{login, "/", 2, http.StatusNoContent},       // two events each, counted once
	} {
		for j := 0; j < s.n; j++ {
			r := httptest.NewRequest("GET", s.path, nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := httptest.NewRecorder()
			s.h.ServeHTTP(w, r)
			if w.Code != s.status {
				t.Fatalf("step %d request %d: status %d, want %d", i, j, w.Code, s.status)
			}
		}
	}
}

// DriveConcurrently runs four goroutines that each take a hook from
// newHook and count 200 allowed decisions with it, over seven policies,
// while registering limiters with watch and collecting with collect now
// and then (run it with -race). The adapter must then report 800 allowed
// decisions in all, and nothing else.
func DriveConcurrently(t *testing.T, newHook func() func(floodgate.DecisionEvent), watch func(string, floodgate.Limiter) error, collect func()) {
	t.Helper()
	clk := floodgatetest.NewClock(T0)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hook := newHook()
			for i := 0; i < 200; i++ {
				hook(floodgate.DecisionEvent{Policy: "p" + strconv.Itoa(i%7), Decision: floodgate.Decision{Allowed: true}})
				if i%50 == 0 {
					_ = watch("l"+strconv.Itoa(g)+"-"+strconv.Itoa(i), NewBucket(t, floodgate.PerMinute(1), clk))
					collect()
				}
			}
		}()
	}
	wg.Wait()
}

// PolicyNames returns n distinct policy names, p0 to p<n-1>.
func PolicyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i)
	}
	return out
}
