package otelmetrics

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newMetrics returns a Metrics on an SDK provider of its own and the
// reader that collects from it.
func newMetrics(t testing.TB, opts ...Option) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	m, err := New(append([]Option{WithMeterProvider(provider)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// points collects once and returns every data point as
// "name{key=value,...}" → value, with the attributes in key order; a
// histogram gives name.count, name.sum and name.bucket{…,le=bound}. It
// checks each instrument's unit and that counters are cumulative and
// monotonic.
func points(t testing.TB, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Fatalf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, mt := range sm.Metrics {
			if want := units[mt.Name]; mt.Unit != want {
				t.Errorf("%s: unit %q, want %q", mt.Name, mt.Unit, want)
			}
			key := func(name string, set attribute.Set, extra ...string) string {
				var kv []string
				for _, a := range set.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.Emit())
				}
				return name + "{" + strings.Join(append(kv, extra...), ",") + "}"
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				if d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: temporality %v", mt.Name, d.Temporality)
				}
				if d.IsMonotonic != monotonic[mt.Name] {
					t.Errorf("%s: monotonic %v", mt.Name, d.IsMonotonic)
				}
				for _, p := range d.DataPoints {
					out[key(mt.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(mt.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(mt.Name+".count", p.Attributes)] = float64(p.Count)
					out[key(mt.Name+".sum", p.Attributes)] = p.Sum
					for i, b := range p.Bounds {
						out[key(mt.Name+".bucket", p.Attributes, "le="+strconv.FormatFloat(b, 'g', -1, 64))] = float64(p.BucketCounts[i])
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", mt.Name, mt.Data)
			}
		}
	}
	return out
}

var units = map[string]string{
	"floodgate.decisions":                   "{decision}",
	"floodgate.decision.duration":           "s",
	"floodgate.store.key.count":             "{key}",
	"floodgate.store.key.limit":             "{key}",
	"floodgate.store.evictions":             "{eviction}",
	"floodgate.store.debt.limit":            "{debt}",
	"floodgate.store.lost_debts":            "{debt}",
	"floodgate.redis.fallback.active":       "1",
	"floodgate.redis.fallback.decisions":    "{decision}",
	"floodgate.redis.deny_cache.hits":       "{hit}",
	"floodgate.redis.errors":                "{error}",
	"floodgate.redis.lease.local_decisions": "{decision}",
	"floodgate.redis.leases":                "{lease}",
	"floodgate.redis.lease.units":           "{unit}",
	"floodgate.redis.lease.returned_units":  "{unit}",
	"floodgate.redis.lease.stranded_units":  "{unit}",
	"floodgate.redis.lease.ahead_units":     "{unit}",
	"floodgate.waiting_call.count":          "{call}",
	"floodgate.capped_charges":              "{charge}",
	"floodgate.inflight.slot.count":         "{slot}",
	"floodgate.inflight.slot.limit":         "{slot}",
	"floodgate.redis.inflight.lost_leases":  "{lease}",
}

var monotonic = map[string]bool{
	"floodgate.decisions":                   true,
	"floodgate.store.evictions":             true,
	"floodgate.store.lost_debts":            true,
	"floodgate.redis.fallback.decisions":    true,
	"floodgate.redis.deny_cache.hits":       true,
	"floodgate.redis.errors":                true,
	"floodgate.redis.lease.local_decisions": true,
	"floodgate.redis.leases":                true,
	"floodgate.redis.lease.units":           true,
	"floodgate.redis.lease.returned_units":  true,
	"floodgate.redis.lease.stranded_units":  true,
	"floodgate.redis.lease.ahead_units":     true,
	"floodgate.redis.inflight.lost_leases":  true,
	"floodgate.capped_charges":              true,
}

// TestHookCountsOutcomes drives real middlewares, one per outcome, and
// checks every decision data point and its attributes.
func TestHookCountsOutcomes(t *testing.T) {
	m, reader := newMetrics(t)
	metricstest.DriveOutcomes(t, m.Hook(), m.Skip)
	want := map[string]float64{}
	for _, p := range metricstest.OutcomePolicies {
		for _, o := range outcomeValues[:metricsbase.Skipped] {
			want["floodgate.decisions{floodgate.outcome="+o+",floodgate.policy="+p+"}"] = 0
		}
	}
	for k, v := range map[string]float64{
		"floodgate.outcome=allowed,floodgate.policy=probe":        3,
		"floodgate.outcome=denied,floodgate.policy=probe":         2,
		"floodgate.outcome=skipped,floodgate.policy=probe":        4,
		"floodgate.outcome=allowed,floodgate.policy=trial":        1,
		"floodgate.outcome=dry_run_denied,floodgate.policy=trial": 2,
		"floodgate.outcome=error,floodgate.policy=broken":         1,
		"floodgate.outcome=denied,floodgate.policy=heavy":         1,
		"floodgate.outcome=allowed,floodgate.policy=login":        2,
	} {
		want["floodgate.decisions{"+k+"}"] = v
	}
	for _, p := range metricstest.OutcomePolicies {
		want["floodgate.capped_charges{floodgate.policy="+p+"}"] = 0
	}
	metricstest.Want(t, points(t, reader), want)
}

// TestObserveFromBusinessCode: decisions made outside the middleware.
func TestObserveFromBusinessCode(t *testing.T) {
	m, reader := newMetrics(t)
	signup := metricstest.NewBucket(t, floodgate.PerMinute(2), floodgatetest.NewClock(metricstest.T0))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := signup.Allow(ctx, "abc{NUM}")
		m.Observe("nickname", d, err)
	}
	d, err := signup.AllowN(ctx, "xyz", 3)
	m.Observe("nickname", d, err)
	m.Observe("nickname", floodgate.Decision{}, metricstest.ErrDown)
	metricstest.Want(t, points(t, reader), map[string]float64{
		"floodgate.decisions{floodgate.outcome=allowed,floodgate.policy=nickname}":        2,
		"floodgate.decisions{floodgate.outcome=denied,floodgate.policy=nickname}":         2,
		"floodgate.decisions{floodgate.outcome=dry_run_denied,floodgate.policy=nickname}": 0,
		"floodgate.decisions{floodgate.outcome=error,floodgate.policy=nickname}":          1,
		"floodgate.capped_charges{floodgate.policy=nickname}":                             0,
	})
}

// TestPolicyAttributesBounded: client keys passed as policy names end up
// under OtherPolicy once MaxPolicies names are known.
func TestPolicyAttributesBounded(t *testing.T) {
	m, reader := newMetrics(t)
	allow := floodgate.Decision{Allowed: true}
	m.Observe("bad\xffname", allow, nil)
	for i := 0; i < MaxPolicies+100; i++ {
		m.Observe("client-"+strconv.Itoa(i), allow, nil)
	}
	got := metricstest.Only(points(t, reader), "floodgate.decisions{floodgate.outcome=allowed,")
	if len(got) != MaxPolicies {
		t.Fatalf("%d policies, want %d", len(got), MaxPolicies)
	}
	if other := got["floodgate.decisions{floodgate.outcome=allowed,floodgate.policy="+OtherPolicy+"}"]; other != 102 {
		t.Fatalf("%v decisions under %s, want 102 (the bad name and 101 clients past the bound)", other, OtherPolicy)
	}
}

// TestLimiterTimesDecisions: each AllowN is one histogram measurement, in
// the bucket of its duration, on a clock that advances 3 ms per pair of
// readings; the advised boundaries are used.
func TestLimiterTimesDecisions(t *testing.T) {
	m, reader := newMetrics(t, WithBuckets(0.001, 0.005, 0.01))
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
	got := metricstest.Only(points(t, reader), "floodgate.decision.duration")
	const sum = "floodgate.decision.duration.sum{floodgate.limiter=redis-probe}"
	if s := got[sum]; math.Abs(s-0.012) > 1e-9 {
		t.Fatalf("sum %v, want 0.012", s)
	}
	delete(got, sum)
	metricstest.Want(t, got, map[string]float64{
		"floodgate.decision.duration.count{floodgate.limiter=redis-probe}":           4,
		"floodgate.decision.duration.bucket{floodgate.limiter=redis-probe,le=0.001}": 0,
		"floodgate.decision.duration.bucket{floodgate.limiter=redis-probe,le=0.005}": 4,
		"floodgate.decision.duration.bucket{floodgate.limiter=redis-probe,le=0.01}":  0,
	})
}

// TestLimiterKeepsInterfaces: the timed limiter is a Refunder, a Resetter
// and reports a Rate exactly as the limiter it wraps.
func TestLimiterKeepsInterfaces(t *testing.T) {
	m, _ := newMetrics(t)
	metricstest.KeepsInterfaces(t, m.Limiter)
}

// TestRegisterErrors: every misuse is an error that says what is wrong.
func TestRegisterErrors(t *testing.T) {
	m, _ := newMetrics(t)
	tb := metricstest.NewBucket(t, floodgate.PerMinute(1), floodgatetest.NewClock(metricstest.T0))
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
		{"bucket infinite", metricstest.Second(New(WithBuckets(math.Inf(1)))), floodgate.ErrInvalidOption},
		{"nil provider", metricstest.Second(New(WithMeterProvider(nil))), floodgate.ErrInvalidOption},
		{"nil option", metricstest.Second(New(nil)), floodgate.ErrInvalidOption},
		{"empty policy name", metricstest.Second(New(WithPolicies("probe", ""))), floodgate.ErrInvalidOption},
		{"policy name not ASCII", metricstest.Second(New(WithPolicies("pr\u00f6be"))), floodgate.ErrInvalidOption},
		{"too many policies", metricstest.Second(New(WithPolicies(metricstest.PolicyNames(MaxPolicies + 1)...))), floodgate.ErrInvalidOption},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if m.Skip("probe", nil) != nil {
		t.Error("Skip(nil) returned a predicate")
	}
}

// TestStoreStatsObserved: the store instruments report the limiter's
// Stats at collection time.
func TestStoreStatsObserved(t *testing.T) {
	m, reader := newMetrics(t)
	tb := metricstest.NewBucket(t, floodgate.PerHour(1), floodgatetest.NewClock(metricstest.T0), floodgate.WithMaxKeys(64))
	if err := m.Watch("reward", tb); err != nil {
		t.Fatal(err)
	}
	st := metricstest.SprayStore(t, tb, 500)
	metricstest.Want(t, metricstest.Only(points(t, reader), "floodgate.store"), map[string]float64{
		"floodgate.store.key.count{floodgate.limiter=reward}":                                float64(st.Keys),
		"floodgate.store.key.limit{floodgate.limiter=reward}":                                64,
		"floodgate.store.evictions{floodgate.eviction.kind=idle,floodgate.limiter=reward}":   float64(st.EvictedIdle),
		"floodgate.store.evictions{floodgate.eviction.kind=live,floodgate.limiter=reward}":   float64(st.EvictedLive),
		"floodgate.store.debt.limit{floodgate.limiter=reward}":                               float64(st.DebtCapacity),
		"floodgate.store.lost_debts{floodgate.debt.kind=merged,floodgate.limiter=reward}":    float64(st.Merged),
		"floodgate.store.lost_debts{floodgate.debt.kind=forgotten,floodgate.limiter=reward}": float64(st.Forgotten),
	})
}

// TestRedisStatsObserved: a Redis limiter's fallback and error counts at
// collection time, next to its latency and its fallback's store.
func TestRedisStatsObserved(t *testing.T) {
	m, reader := newMetrics(t)
	fb := metricstest.NewBucket(t, floodgate.PerMinute(100), floodgatetest.NewClock(metricstest.T0))
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
	got := points(t, reader)
	metricstest.Want(t, metricstest.Only(got, "floodgate.redis"), map[string]float64{
		"floodgate.redis.fallback.active{floodgate.limiter=probe}":            1,
		"floodgate.redis.fallback.decisions{floodgate.limiter=probe}":         5,
		"floodgate.redis.deny_cache.hits{floodgate.limiter=probe}":            0,
		"floodgate.redis.errors{error.type=timeout,floodgate.limiter=probe}":  0,
		"floodgate.redis.errors{error.type=canceled,floodgate.limiter=probe}": 0,
		"floodgate.redis.errors{error.type=other,floodgate.limiter=probe}":    1,
	})
	if n := got["floodgate.decision.duration.count{floodgate.limiter=probe}"]; n != 5 {
		t.Errorf("%v decisions timed, want 5", n)
	}
	if n := got["floodgate.store.key.count{floodgate.limiter=probe-fallback}"]; n != 1 {
		t.Errorf("fallback store holds %v keys, want 1", n)
	}
}

// TestGlobalProviderByDefault: without WithMeterProvider the instruments
// come from the global provider.
func TestGlobalProviderByDefault(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(provider)
	t.Cleanup(func() {
		otel.SetMeterProvider(prev)
		_ = provider.Shutdown(context.Background())
	})
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	m.Observe("global", floodgate.Decision{Allowed: true}, nil)
	if v := points(t, reader)["floodgate.decisions{floodgate.outcome=allowed,floodgate.policy=global}"]; v != 1 {
		t.Fatalf("global provider saw %v decisions, want 1", v)
	}
}

// TestConcurrentUse: the hook, registration and collections at once (run
// with -race).
func TestConcurrentUse(t *testing.T) {
	m, reader := newMetrics(t)
	metricstest.DriveConcurrently(t, m.Hook, m.Watch, func() { _ = points(t, reader) })
	total := 0.0
	for k, v := range metricstest.Only(points(t, reader), "floodgate.decisions") {
		if v != 0 && !strings.Contains(k, "outcome=allowed") {
			t.Fatalf("%s = %v", k, v)
		}
		total += v
	}
	if total != 800 {
		t.Fatalf("%v decisions counted, want 800", total)
	}
}

// TestDeclaredPoliciesStartAtZero: every outcome of every declared policy
// is a data point at 0 from the first collection, before the first
// decision, so that a rate over the exported counter counts the first
// burst; the decisions then count on those streams. An undeclared policy
// appears with its first decision, as before.
func TestDeclaredPoliciesStartAtZero(t *testing.T) {
	m, reader := newMetrics(t, WithPolicies("user_id_probe", "nickname"), WithPolicies("user_id_probe"))
	want := map[string]float64{}
	for _, p := range []string{"user_id_probe", "nickname"} {
		for _, o := range outcomeValues[:metricsbase.Skipped] {
			want["floodgate.decisions{floodgate.outcome="+o+",floodgate.policy="+p+"}"] = 0
		}
		want["floodgate.capped_charges{floodgate.policy="+p+"}"] = 0
	}
	metricstest.Want(t, points(t, reader), want)

	hook := m.Hook()
	for i := 0; i < 12; i++ {
		hook(floodgate.DecisionEvent{Policy: "user_id_probe", Decision: floodgate.Decision{Allowed: i < 10}, Blocked: i >= 10})
	}
	m.Observe("nickname", floodgate.Decision{}, metricstest.ErrDown)
	m.Observe("undeclared", floodgate.Decision{Allowed: true}, nil)
	want["floodgate.decisions{floodgate.outcome=allowed,floodgate.policy=user_id_probe}"] = 10
	want["floodgate.decisions{floodgate.outcome=denied,floodgate.policy=user_id_probe}"] = 2
	want["floodgate.decisions{floodgate.outcome=error,floodgate.policy=nickname}"] = 1
	for _, o := range outcomeValues[:metricsbase.Skipped] {
		want["floodgate.decisions{floodgate.outcome="+o+",floodgate.policy=undeclared}"] = 0
	}
	want["floodgate.decisions{floodgate.outcome=allowed,floodgate.policy=undeclared}"] = 1
	want["floodgate.capped_charges{floodgate.policy=undeclared}"] = 0
	// A settlement the debt limits capped counts apart, never as a
	// decision; one that was not capped counts nowhere.
	hook(floodgate.DecisionEvent{Policy: "nickname", AfterHandler: true, Charged: 1 << 24, DebtCapped: true})
	hook(floodgate.DecisionEvent{Policy: "nickname", AfterHandler: true, Charged: 3})
	want["floodgate.capped_charges{floodgate.policy=nickname}"] = 1
	metricstest.Want(t, points(t, reader), want)
}
