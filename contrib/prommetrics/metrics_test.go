package prommetrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newMetrics(t testing.TB, opts ...Option) *Metrics {
	t.Helper()
	m, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// series gathers m through a registry of its own and returns every sample
// as "name{label=value,...}" → value; a histogram gives name_count,
// name_sum and one name_bucket per bound.
func series(t testing.TB, m prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return flatten(mfs)
}

func flatten(mfs []*dto.MetricFamily) map[string]float64 {
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, lp := range mt.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			name := func(suffix string, extra ...string) string {
				return mf.GetName() + suffix + "{" + strings.Join(append(slices.Clone(labels), extra...), ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[name("")] = mt.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name("")] = mt.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := mt.GetHistogram()
				out[name("_count")] = float64(h.GetSampleCount())
				out[name("_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[name("_bucket", "le="+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// only keeps the samples whose name starts with prefix.
func only(s map[string]float64, prefix string) map[string]float64 {
	out := make(map[string]float64)
	for k, v := range s {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

func wantSeries(t testing.TB, got, want map[string]float64) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	keys := slices.Sorted(maps.Keys(got))
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range slices.Compact(keys) {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			fmt.Fprintf(&b, "\n  %s: got %v (present %v), want %v (present %v)", k, g, gok, w, wok)
		}
	}
	t.Fatalf("series differ:%s", b.String())
}

func newBucket(t testing.TB, r floodgate.Rate, clk *floodgatetest.Clock, opts ...floodgate.Option) *floodgate.TokenBucket {
	t.Helper()
	b, err := floodgate.NewTokenBucket(r, append(opts, floodgate.WithClock(clk.Now))...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// failing is a limiter whose store is down.
type failing struct{}

var errDown = errors.New("store down")

func (failing) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{}, errDown
}

func serve(h http.Handler, method, target, peer string) int {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = peer
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestHookCountsOutcomes drives real middlewares, one per outcome, and
// checks every decision series.
func TestHookCountsOutcomes(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(t0)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mw := func(l floodgate.Limiter, opts ...floodgate.MiddlewareOption) http.Handler {
		h, err := floodgate.NewMiddleware(l, append(opts, floodgate.WithDecisionHook(m.Hook()))...)
		if err != nil {
			t.Fatal(err)
		}
		return h(ok)
	}
	probe := mw(newBucket(t, floodgate.PerMinute(3), clk), floodgate.WithPolicyName("probe"),
		floodgate.WithSkip(m.Skip("probe", func(r *http.Request) bool { return r.URL.Path == "/healthz" })))
	trial := mw(newBucket(t, floodgate.PerMinute(1), clk), floodgate.WithPolicyName("trial"), floodgate.WithDryRun())
	broken := mw(failing{}, floodgate.WithPolicyName("broken"))
	heavy := mw(newBucket(t, floodgate.PerMinute(2), clk), floodgate.WithPolicyName("heavy"), floodgate.WithCostFunc(func(*http.Request) (int, error) { return 5, nil }))
	login := mw(newBucket(t, floodgate.PerMinute(5), clk), floodgate.WithPolicyName("login"),
		floodgate.WithCountStatus(func(int) bool { return true }))

	steps := []struct {
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
	}
	for i, s := range steps {
		for j := 0; j < s.n; j++ {
			if got := serve(s.h, "GET", s.path, "192.0.2.1:1234"); got != s.status {
				t.Fatalf("step %d request %d: status %d, want %d", i, j, got, s.status)
			}
		}
	}
	want := map[string]float64{}
	for _, p := range []string{"probe", "trial", "broken", "heavy", "login"} {
		for _, o := range outcomeLabels {
			want["floodgate_decisions_total{outcome="+o+",policy="+p+"}"] = 0
		}
	}
	for k, v := range map[string]float64{
		"outcome=allowed,policy=probe":        3,
		"outcome=denied,policy=probe":         2,
		"outcome=skipped,policy=probe":        4,
		"outcome=allowed,policy=trial":        1,
		"outcome=dry_run_denied,policy=trial": 2,
		"outcome=error,policy=broken":         1,
		"outcome=denied,policy=heavy":         1,
		"outcome=allowed,policy=login":        2,
	} {
		want["floodgate_decisions_total{"+k+"}"] = v
	}
	wantSeries(t, series(t, m), want)
}

// TestObserveFromBusinessCode: decisions made outside the middleware.
func TestObserveFromBusinessCode(t *testing.T) {
	m := newMetrics(t)
	clk := floodgatetest.NewClock(t0)
	signup := newBucket(t, floodgate.PerMinute(2), clk)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := signup.Allow(ctx, "abc{NUM}")
		m.Observe("nickname", d, err)
	}
	d, err := signup.AllowN(ctx, "xyz", 3)
	m.Observe("nickname", d, err)
	m.Observe("nickname", floodgate.Decision{}, errDown)
	wantSeries(t, series(t, m), map[string]float64{
		"floodgate_decisions_total{outcome=allowed,policy=nickname}":        2,
		"floodgate_decisions_total{outcome=denied,policy=nickname}":         2,
		"floodgate_decisions_total{outcome=dry_run_denied,policy=nickname}": 0,
		"floodgate_decisions_total{outcome=error,policy=nickname}":          1,
	})
}

// TestPolicyLabelsBounded: a program that passes client keys as policy
// names gets MaxPolicies series and OtherPolicy, not a series per client;
// a name that is not printable ASCII is never a label.
func TestPolicyLabelsBounded(t *testing.T) {
	m := newMetrics(t)
	allow := floodgate.Decision{Allowed: true}
	m.Observe("bad\xffname", allow, nil)
	for i := 0; i < MaxPolicies+100; i++ {
		m.Observe("client-"+strconv.Itoa(i), allow, nil)
	}
	got := series(t, m)
	policies := map[string]bool{}
	for k := range got {
		_, p, _ := strings.Cut(k, "policy=")
		policies[strings.TrimSuffix(p, "}")] = true
	}
	if len(policies) != MaxPolicies {
		t.Fatalf("%d policy labels, want %d", len(policies), MaxPolicies)
	}
	// The bad name made OtherPolicy first, one of the MaxPolicies known;
	// the first MaxPolicies-1 clients got series of their own, the other
	// 101 share OtherPolicy with the bad name.
	other := got["floodgate_decisions_total{outcome=allowed,policy="+OtherPolicy+"}"]
	own := 0
	for k, v := range got {
		if strings.Contains(k, "outcome=allowed,policy=client-") {
			if v != 1 {
				t.Fatalf("%s = %v, want 1", k, v)
			}
			own++
		}
	}
	if own != MaxPolicies-1 || other != 102 {
		t.Fatalf("%d clients with their own series, %v decisions under %s; want %d and 102", own, other, OtherPolicy, MaxPolicies-1)
	}
}
