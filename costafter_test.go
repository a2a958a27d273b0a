package floodgate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"golang.org/x/time/rate"
)

// frozenAt is the fixed time of the cost-after tests: no token comes back
// during a test, so every debt is exact.
var frozenAt = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func frozenBucket(t *testing.T, r floodgate.Rate) *floodgate.TokenBucket {
	t.Helper()
	return mustTokenBucketX(t, r, floodgate.WithClock(func() time.Time { return frozenAt }), widestDebt())
}

// widestDebt lets a key owe as much as a limiter can hold, for the tests
// of a debt's arithmetic; the default limits have tests of their own.
func widestDebt() floodgate.Option {
	return floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: floodgate.MaxDebtLimit, Total: floodgate.MaxDebtLimit})
}

// serveOnce sends one request to h and returns the recorder.
func serveOnce(h http.Handler, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

// reportingHandler reports the cost in the request's ?cost= and writes
// ?bytes= bytes, and the header X-Cost from ?header=.
func reportingHandler(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if c := q.Get("cost"); c != "" {
			n, _ := strconv.Atoi(c)
			if err := floodgate.ReportCost(r.Context(), n); err != nil {
				t.Errorf("ReportCost: %v", err)
			}
		}
		if h := q.Get("header"); h != "" {
			w.Header().Set("X-Cost", h)
		}
		if b := q.Get("bytes"); b != "" {
			n, _ := strconv.Atoi(b)
			_, _ = w.Write([]byte(strings.Repeat("x", n)))
		}
	})
}

// A request is charged its real cost after the response, from each
// source; the key goes into debt, and its next request is denied with a
// Retry-After and RateLimit fields that count the debt (t beyond the
// window w, remaining 0).
func TestCostAfterChargesTheRealCost(t *testing.T) {
	bytesCost, err := floodgate.CostBytes(1000)
	if err != nil {
		t.Fatal(err)
	}
	headerCost, err := floodgate.CostHeader("x-cost")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cost   func(floodgate.Response) (int, bool)
		target string
		// retry is the next request's wait: (charged + 1 − 10) × 6 min.
		retry time.Duration
	}{
		{"reported", floodgate.CostReported, "/?cost=25", 16 * 6 * time.Minute},
		{"reported nothing: the estimate", floodgate.CostReported, "/", 0},
		{"bytes, rounded up", bytesCost, "/?bytes=14001", 6 * 6 * time.Minute},
		{"header", headerCost, "/?header=12", 3 * 6 * time.Minute},
		{"malformed header: what was reported", headerCost, "/?header=-3&cost=11", 2 * 6 * time.Minute},
		{"less than the estimate: given back", floodgate.CostReported, "/?cost=0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := frozenBucket(t, floodgate.PerHour(10))
			mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCostAfter(tt.cost))
			if err != nil {
				t.Fatal(err)
			}
			h := mw(reportingHandler(t))
			if rec := serveOnce(h, tt.target); rec.Code != http.StatusOK {
				t.Fatalf("first request: %d", rec.Code)
			}
			if tt.retry == 0 { // no debt: 9 (or 10) more pass
				if d, _ := lim.AllowN(context.Background(), "GET", 0); d.Remaining < 9 {
					t.Fatalf("%d tokens left, want 9 or 10", d.Remaining)
				}
				return
			}
			rec := serveOnce(h, "/")
			wantSecs := strconv.FormatInt(int64(tt.retry/time.Second), 10)
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != wantSecs ||
				rec.Header().Get("RateLimit") != `"default";r=0;t=`+wantSecs || rec.Header().Get("RateLimit-Policy") != `"default";q=10;w=3600` {
				t.Errorf("in debt: %d, %v; want 429, Retry-After and t %s", rec.Code, rec.Header(), wantSecs)
			}
		})
	}
}

// Concurrent requests over-spend by at most what was in flight: 10
// requests at once on a quota of 10, each costing 5 with an estimate of 1,
// while 20 more arrive and are denied. The key owes exactly 40 (10 × (5 −
// 1)) and waits for 41 units; nothing else was charged.
func TestCostAfterOverSpendBoundedByInFlight(t *testing.T) {
	lim := frozenBucket(t, floodgate.PerHour(10))
	var (
		mu      sync.Mutex
		charged int
	)
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()),
		floodgate.WithCostAfter(floodgate.CostReported),
		floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) {
			mu.Lock()
			charged += ev.Charged
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}, 10), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- struct{}{}
		<-release
		_ = floodgate.ReportCost(r.Context(), 5)
	}))
	codes := make(chan int, 30)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); codes <- serveOnce(h, "/").Code }()
	}
	for range 10 {
		<-inside
	}
	for range 20 { // while the 10 run: the quota is taken by their estimates
		codes <- serveOnce(h, "/").Code
	}
	close(release)
	wg.Wait()
	close(codes)
	counts := map[int]int{}
	for c := range codes {
		counts[c]++
	}
	rec := serveOnce(h, "/")
	if counts[http.StatusOK] != 10 || counts[http.StatusTooManyRequests] != 20 || charged != 40 ||
		rec.Header().Get("Retry-After") != strconv.Itoa(41*360) {
		t.Errorf("answers %v, charged %d after the handlers, next Retry-After %s; want 10 × 200, 20 × 429, 40, %d",
			counts, charged, rec.Header().Get("Retry-After"), 41*360)
	}
}

// A handler that panics is charged at least its estimate, and what it
// reported before panicking if that is more.
func TestCostAfterPanicCharged(t *testing.T) {
	for _, tt := range []struct {
		report, left int
	}{{-1, 7}, {1, 7}, {5, 5}} {
		lim := frozenBucket(t, floodgate.PerHour(10))
		mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCost(3), floodgate.WithCostAfter(floodgate.CostReported))
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tt.report >= 0 {
				_ = floodgate.ReportCost(r.Context(), tt.report)
			}
			panic("boom")
		}))
		func() {
			defer func() { _ = recover() }()
			serveOnce(h, "/")
		}()
		if d, _ := lim.AllowN(context.Background(), "GET", 0); d.Remaining != tt.left {
			t.Errorf("reported %d, then panicked: %d left, want %d", tt.report, d.Remaining, tt.left)
		}
	}
}

// With WithCountStatus, a request that does not count costs nothing,
// whatever it reported; one that counts is charged its real cost.
func TestCostAfterWithCountStatus(t *testing.T) {
	lim := frozenBucket(t, floodgate.PerHour(10))
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCostAfter(floodgate.CostReported),
		floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = floodgate.ReportCost(r.Context(), 4)
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	serveOnce(h, "/")
	serveOnce(h, "/fail")
	if d, _ := lim.AllowN(context.Background(), "GET", 0); d.Remaining != 6 {
		t.Errorf("%d left, want 6: only the failure's 4 count", d.Remaining)
	}
}

// ReportCost refuses what would do nothing or make no sense.
func TestReportCostErrors(t *testing.T) {
	if err := floodgate.ReportCost(context.Background(), 3); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("no metered limit: %v, want ErrInvalidOption", err)
	}
	lim := frozenBucket(t, floodgate.PerHour(10))
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCostAfter(floodgate.CostReported))
	if err != nil {
		t.Fatal(err)
	}
	var got error
	serveOnce(mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = floodgate.ReportCost(r.Context(), -1) })), "/")
	if !errors.Is(got, floodgate.ErrInvalidCost) {
		t.Errorf("negative cost: %v, want ErrInvalidCost", got)
	}
}

// A report from a goroutine that outlived its handler comes after the
// call settled: it is refused with an error instead of being dropped in
// silence (before, ReportCost returned nil and nothing was charged), and
// the call stays charged what was reported in time.
func TestReportCostAfterSettleIsRefused(t *testing.T) {
	lim := frozenBucket(t, floodgate.PerHour(10))
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCostAfter(floodgate.CostReported))
	if err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	serveOnce(mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		ctx = r.Context()
		if err := floodgate.ReportCost(ctx, 3); err != nil {
			t.Errorf("report in time: %v", err)
		}
	})), "/")
	if err := floodgate.ReportCost(ctx, 8); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("report after the call settled: %v, want ErrInvalidOption", err)
	}
	if d, _ := lim.AllowN(context.Background(), "GET", 0); d.Remaining != 7 {
		t.Errorf("%d left, want 7: the 3 reported in time", d.Remaining)
	}
}

// Two metered limits, one around the other: a report reaches both.
func TestReportCostReachesNestedLimits(t *testing.T) {
	outer, inner := frozenBucket(t, floodgate.PerHour(10)), frozenBucket(t, floodgate.PerHour(20))
	mwOuter, err := floodgate.NewMiddleware(outer, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCostAfter(floodgate.CostReported))
	if err != nil {
		t.Fatal(err)
	}
	mwInner, err := floodgate.NewMiddleware(inner, floodgate.WithKeyFunc(floodgate.KeyByMethod()), floodgate.WithCostAfter(floodgate.CostReported))
	if err != nil {
		t.Fatal(err)
	}
	serveOnce(mwOuter(mwInner(reportingHandler(t))), "/?cost=6")
	o, _ := outer.AllowN(context.Background(), "GET", 0)
	i, _ := inner.AllowN(context.Background(), "GET", 0)
	if o.Remaining != 4 || i.Remaining != 14 {
		t.Errorf("left %d and %d, want 4 and 14", o.Remaining, i.Remaining)
	}
}

// A limiter that cannot charge or give back is refused at construction,
// as are the cost functions' bad arguments.
func TestCostAfterRefusedConfigurations(t *testing.T) {
	shared, err := floodgate.FromRateLimiter(rate.NewLimiter(10, 10))
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]floodgate.Limiter{"SharedLimiter": shared, "InFlight": mustInFlight(t, 3)} {
		if _, err := floodgate.NewMiddleware(l, floodgate.WithCostAfter(floodgate.CostReported)); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := floodgate.NewMiddleware(frozenBucket(t, floodgate.PerHour(1)), floodgate.WithCostAfter(nil)); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("nil cost function: %v", err)
	}
	if _, err := floodgate.NewMiddleware(frozenBucket(t, floodgate.PerHour(1)), floodgate.WithSettledCost()); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("WithSettledCost on the middleware, whose handlers could report to no meter: %v", err)
	}
	if f, err := floodgate.CostBytes(0); f != nil || !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("CostBytes(0): %v", err)
	}
	if f, err := floodgate.CostHeader(""); f != nil || !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("CostHeader(\"\"): %v", err)
	}
}

// A debt saturates and never wraps: charges of the largest cost, again
// and again, on the slowest rate, leave a key denied with a finite,
// positive wait that never goes back down, and a Remaining of 0; a
// charge that reaches the bound says so (ErrDebtCapped).
func TestChargeNSaturates(t *testing.T) {
	ctx := context.Background()
	for _, interval := range []bool{false, true} {
		opts := []floodgate.Option{floodgate.WithClock(func() time.Time { return frozenAt }), widestDebt()}
		if interval {
			opts = append(opts, floodgate.WithIntervalRefill())
		}
		lim := mustTokenBucketX(t, floodgate.Rate{Limit: 1, Period: 50 * 365 * 24 * time.Hour}, opts...)
		var last time.Duration
		for i := 0; i < 200; i++ {
			if err := lim.ChargeN(ctx, "k", 1<<30); !errors.Is(err, floodgate.ErrDebtCapped) {
				t.Fatalf("charge %d: %v, want ErrDebtCapped: 2^30 is above the largest cost", i, err)
			}
			d, err := lim.AllowN(ctx, "k", 1)
			if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter < last {
				t.Fatalf("interval %v, charge %d: %+v, %v (last wait %v)", interval, i, d, err, last)
			}
			last = d.RetryAfter
		}
		if last < time.Duration(1)<<61 {
			t.Errorf("interval %v: saturated wait %v, want about 2^62 ns", interval, last)
		}
	}
	lim := frozenBucket(t, floodgate.PerHour(10))
	if err := lim.ChargeN(ctx, "k", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("negative charge: %v", err)
	}
}

// A request its cost function prices at nothing still needs a unit in
// hand under WithCostAfter: a key in debt is refused, not let through
// free to run up more; a free request that costs nothing is charged
// nothing.
func TestCostAfterFreeRequestWaitsOutADebt(t *testing.T) {
	lim := frozenBucket(t, floodgate.PerHour(10))
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()),
		floodgate.WithCostFunc(func(*http.Request) (int, error) { return 0, nil }),
		floodgate.WithCostAfter(floodgate.CostReported))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(reportingHandler(t))
	if rec := serveOnce(h, "/?cost=0"); rec.Code != http.StatusOK {
		t.Fatalf("free request: %d", rec.Code)
	}
	if d, _ := lim.AllowN(context.Background(), "GET", 0); d.Remaining != 10 {
		t.Fatalf("a request that cost nothing was charged: %d left", d.Remaining)
	}
	serveOnce(h, "/?cost=30")
	if rec := serveOnce(h, "/"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a free request of a key in debt: %d, want 429", rec.Code)
	}
}
