package prommetrics

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLimiterTimesDecisions: each AllowN of a timed limiter is one
// observation, in the bucket of its duration, on a clock that advances
// 3 ms per reading pair.
func TestLimiterTimesDecisions(t *testing.T) {
	m := newMetrics(t, WithBuckets(0.001, 0.005, 0.01))
	clk := floodgatetest.NewClock(metricstest.T0)
	m.now = metricstest.SteppingClock(clk, 3*time.Millisecond)
	l, err := m.Limiter("redis-probe", metricstest.NewBucket(t, floodgate.PerMinute(2), clk))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := l.AllowN(context.Background(), "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	got := metricstest.Only(series(t, m), "floodgate_decision_duration_seconds")
	if s := got["floodgate_decision_duration_seconds_sum{limiter=redis-probe}"]; math.Abs(s-0.012) > 1e-9 {
		t.Fatalf("sum %v, want 0.012", s)
	}
	delete(got, "floodgate_decision_duration_seconds_sum{limiter=redis-probe}")
	metricstest.Want(t, got, map[string]float64{
		"floodgate_decision_duration_seconds_count{limiter=redis-probe}":           4,
		"floodgate_decision_duration_seconds_bucket{limiter=redis-probe,le=0.001}": 0,
		"floodgate_decision_duration_seconds_bucket{limiter=redis-probe,le=0.005}": 4,
		"floodgate_decision_duration_seconds_bucket{limiter=redis-probe,le=0.01}":  4,
	})
}

// TestLimiterKeepsInterfaces: the timed limiter is a Refunder, a Resetter
// and reports a Rate exactly as the limiter it wraps.
func TestLimiterKeepsInterfaces(t *testing.T) {
	metricstest.KeepsInterfaces(t, newMetrics(t).Limiter)
}

// TestTimedLimiterInMiddleware: wrapped, a token bucket still advertises
// its window in RateLimit-Policy, refunds through floodgate.All and
// resets.
func TestTimedLimiterInMiddleware(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(metricstest.T0)
	l, err := m.Limiter("probe", metricstest.NewBucket(t, floodgate.Rate{Limit: 10, Period: 10 * time.Minute}, clk))
	if err != nil {
		t.Fatal(err)
	}
	h := floodgate.Middleware(l, floodgate.WithPolicyName("probe"))(http.NotFoundHandler())
	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if got, want := w.Header().Get("RateLimit-Policy"), `"probe";q=10;w=600`; got != want {
		t.Fatalf("RateLimit-Policy %q, want %q", got, want)
	}
	ctx := context.Background()
	// One limiter of the composite has room for 1, so the other must
	// give back the unit it took: through the wrapper's RefundN.
	small, err := m.Limiter("small", metricstest.NewBucket(t, floodgate.PerMinute(1), clk))
	if err != nil {
		t.Fatal(err)
	}
	both, err := floodgate.All(l, small)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := both.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v", d, err)
	}
	if d, err := both.AllowN(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("second: %+v, %v; want a denial", d, err)
	}
	if d, _ := l.AllowN(ctx, "k", 0); d.Remaining != 9 {
		t.Fatalf("after a refused composite: %d remaining, want 9 (one taken, none lost)", d.Remaining)
	}
	if err := l.(floodgate.Resetter).Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AllowN(ctx, "k", 0); d.Remaining != 10 {
		t.Fatalf("after Reset: %d remaining, want 10", d.Remaining)
	}
}

// TestRegisterErrors: every misuse is an error that says what is wrong.
func TestRegisterErrors(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(metricstest.T0)
	tb := metricstest.NewBucket(t, floodgate.PerMinute(1), clk)
	if _, err := m.Limiter("probe", tb); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"Limiter twice", metricstest.Second(m.Limiter("probe", tb)), ErrDuplicateName},
		{"Watch after Limiter", m.Watch("probe", tb), ErrDuplicateName},
		{"empty name", metricstest.Second(m.Limiter("", tb)), floodgate.ErrInvalidOption},
		{"name not ASCII", m.Watch("pr\u00f6be", tb), floodgate.ErrInvalidOption},
		{"nil limiter", metricstest.Second(m.Limiter("nil", nil)), floodgate.ErrInvalidOption},
		{"watch nil", m.Watch("nil", nil), floodgate.ErrInvalidOption},
		{"watch without Stats", m.Watch("bare", metricstest.Bare{Limiter: tb}), floodgate.ErrInvalidOption},
		{"no buckets", metricstest.Second(New(WithBuckets())), floodgate.ErrInvalidOption},
		{"buckets out of order", metricstest.Second(New(WithBuckets(0.1, 0.01))), floodgate.ErrInvalidOption},
		{"bucket NaN", metricstest.Second(New(WithBuckets(math.NaN()))), floodgate.ErrInvalidOption},
		{"nil option", metricstest.Second(New(nil)), floodgate.ErrInvalidOption},
		{"empty policy name", metricstest.Second(New(WithPolicies("probe", ""))), floodgate.ErrInvalidOption},
		{"policy name not ASCII", metricstest.Second(New(WithPolicies("pr\u00f6be"))), floodgate.ErrInvalidOption},
		{"too many policies", metricstest.Second(New(WithPolicies(metricstest.PolicyNames(MaxPolicies + 1)...))), floodgate.ErrInvalidOption},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if err := m.Watch("bare", metricstest.Bare{Limiter: tb}); errors.Is(err, ErrDuplicateName) {
		t.Errorf("a refused Watch registered its name: %v", err)
	}
	if m.Skip("probe", nil) != nil {
		t.Error("Skip(nil) returned a predicate")
	}
	if _, err := floodgate.NewMiddleware(tb, floodgate.WithSkip(m.Skip("probe", nil))); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("WithSkip(Skip(nil)): err = %v, want ErrInvalidOption", err)
	}
}

// TestStoreStatsScraped: the store gauges and eviction counters are the
// limiter's Stats at the time of the scrape.
func TestStoreStatsScraped(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(metricstest.T0)
	tb := metricstest.NewBucket(t, floodgate.PerHour(1), clk, floodgate.WithMaxKeys(64))
	if err := m.Watch("reward", tb); err != nil {
		t.Fatal(err)
	}
	st := metricstest.SprayStore(t, tb, 500)
	got := metricstest.Only(series(t, m), "floodgate_store")
	metricstest.Want(t, got, map[string]float64{
		"floodgate_store_keys{limiter=reward}":                            float64(st.Keys),
		"floodgate_store_max_keys{limiter=reward}":                        64,
		"floodgate_store_evictions_total{kind=idle,limiter=reward}":       float64(st.EvictedIdle),
		"floodgate_store_evictions_total{kind=live,limiter=reward}":       float64(st.EvictedLive),
		"floodgate_store_debt_capacity{limiter=reward}":                   float64(st.DebtCapacity),
		"floodgate_store_debts_lost_total{kind=merged,limiter=reward}":    float64(st.Merged),
		"floodgate_store_debts_lost_total{kind=forgotten,limiter=reward}": float64(st.Forgotten),
	})
}

// TestRedisStatsScraped: a Redis limiter's fallback and error counts, read
// at scrape time, next to its latency and its fallback's store.
func TestRedisStatsScraped(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(metricstest.T0)
	fb := metricstest.NewBucket(t, floodgate.PerMinute(100), clk)
	rl, err := redisstore.NewTokenBucket(metricstest.DownServer{}, floodgate.PerMinute(100),
		redisstore.WithFallback(fb), redisstore.WithProbeInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Limiter("probe", rl)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Watch("probe-fallback", fb); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if d, err := l.AllowN(context.Background(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v: want the fallback's allowance", d, err)
		}
	}
	got := series(t, m)
	metricstest.Want(t, metricstest.Only(got, "floodgate_redis"), map[string]float64{
		"floodgate_redis_fallback_active{limiter=probe}":            1,
		"floodgate_redis_fallback_decisions_total{limiter=probe}":   5,
		"floodgate_redis_deny_cache_hits_total{limiter=probe}":      0,
		"floodgate_redis_errors_total{kind=timeout,limiter=probe}":  0,
		"floodgate_redis_errors_total{kind=canceled,limiter=probe}": 0,
		"floodgate_redis_errors_total{kind=other,limiter=probe}":    1,
	})
	if n := got["floodgate_decision_duration_seconds_count{limiter=probe}"]; n != 5 {
		t.Errorf("%v decisions timed, want 5", n)
	}
	if n := got["floodgate_store_keys{limiter=probe-fallback}"]; n != 1 {
		t.Errorf("fallback store holds %v keys, want 1", n)
	}
}

// TestCollectAndLint: every metric family, filled, passes promlint.
func TestCollectAndLint(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(metricstest.T0)
	mem := metricstest.NewBucket(t, floodgate.PerMinute(1), clk)
	if err := m.Watch("mem", mem); err != nil {
		t.Fatal(err)
	}
	rl, err := redisstore.NewTokenBucket(metricstest.DownServer{}, floodgate.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Limiter("redis", rl)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := redisstore.NewSlidingCounter(metricstest.DownServer{}, floodgate.PerMinute(100), redisstore.WithLease(redisstore.Lease{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Watch("leased", leased); err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(context.Background(), "k", 1)
	m.Observe("p", d, err)
	_ = m.Skip("p", func(*http.Request) bool { return true })
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Fatalf("promlint: %+v", problems)
	}
	if n := len(series(t, m)); n < 40 {
		t.Fatalf("%d samples gathered; want every family filled", n)
	}
}

// TestConcurrentUse: the hook, Observe, registration and scrapes at once
// (run with -race).
func TestConcurrentUse(t *testing.T) {
	m := newMetrics(t)
	metricstest.DriveConcurrently(t, m.Hook, m.Watch, func() { _ = series(t, m) })
	total := 0.0
	for k, v := range metricstest.Only(series(t, m), "floodgate_decisions_total") {
		if v != 0 && !strings.Contains(k, "outcome=allowed") {
			t.Fatalf("%s = %v", k, v)
		}
		total += v
	}
	if total != 800 {
		t.Fatalf("%v decisions counted, want 800", total)
	}
}
