package prommetrics

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

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

// TestHookCountsOutcomes drives real middlewares, one per outcome, and
// checks every decision series.
func TestHookCountsOutcomes(t *testing.T) {
	m := newMetrics(t)
	metricstest.DriveOutcomes(t, m.Hook(), m.Skip)
	want := map[string]float64{}
	for _, p := range metricstest.OutcomePolicies {
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
	for _, p := range metricstest.OutcomePolicies {
		want["floodgate_capped_charges_total{policy="+p+"}"] = 0
	}
	metricstest.Want(t, series(t, m), want)
}

// TestObserveFromBusinessCode: decisions made outside the middleware.
func TestObserveFromBusinessCode(t *testing.T) {
	m := newMetrics(t)
	signup := metricstest.NewBucket(t, floodgate.PerMinute(2), floodgatetest.NewClock(metricstest.T0))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := signup.Allow(ctx, "abc{NUM}")
		m.Observe("nickname", d, err)
	}
	d, err := signup.AllowN(ctx, "xyz", 3)
	m.Observe("nickname", d, err)
	m.Observe("nickname", floodgate.Decision{}, metricstest.ErrDown)
	metricstest.Want(t, series(t, m), map[string]float64{
		"floodgate_decisions_total{outcome=allowed,policy=nickname}":        2,
		"floodgate_decisions_total{outcome=denied,policy=nickname}":         2,
		"floodgate_decisions_total{outcome=dry_run_denied,policy=nickname}": 0,
		"floodgate_capped_charges_total{policy=nickname}":                   0,
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

// TestDeclaredPoliciesStartAtZero: every outcome of every declared policy
// is a series at 0 before the first decision, so that the first sample
// Prometheus scrapes is 0 and increase() counts the first burst; the
// decisions then count on those series. An undeclared policy appears
// with its first decision, as before.
func TestDeclaredPoliciesStartAtZero(t *testing.T) {
	m := newMetrics(t, WithPolicies("user_id_probe", "nickname"), WithPolicies("user_id_probe"))
	want := map[string]float64{}
	for _, p := range []string{"user_id_probe", "nickname"} {
		for _, o := range outcomeLabels {
			want["floodgate_decisions_total{outcome="+o+",policy="+p+"}"] = 0
		}
		want["floodgate_capped_charges_total{policy="+p+"}"] = 0
	}
	metricstest.Want(t, series(t, m), want)

	hook := m.Hook()
	for i := 0; i < 12; i++ {
		hook(floodgate.DecisionEvent{Policy: "user_id_probe", Decision: floodgate.Decision{Allowed: i < 10}, Blocked: i >= 10})
	}
	m.Observe("nickname", floodgate.Decision{}, metricstest.ErrDown)
	m.Observe("undeclared", floodgate.Decision{Allowed: true}, nil)
	want["floodgate_decisions_total{outcome=allowed,policy=user_id_probe}"] = 10
	want["floodgate_decisions_total{outcome=denied,policy=user_id_probe}"] = 2
	want["floodgate_decisions_total{outcome=error,policy=nickname}"] = 1
	for _, o := range outcomeLabels {
		want["floodgate_decisions_total{outcome="+o+",policy=undeclared}"] = 0
	}
	want["floodgate_decisions_total{outcome=allowed,policy=undeclared}"] = 1
	want["floodgate_capped_charges_total{policy=undeclared}"] = 0
	// A settlement the debt limits capped counts apart, never as a
	// decision; one that was not capped counts nowhere.
	hook(floodgate.DecisionEvent{Policy: "nickname", AfterHandler: true, Charged: 1 << 24, DebtCapped: true})
	hook(floodgate.DecisionEvent{Policy: "nickname", AfterHandler: true, Charged: 3})
	want["floodgate_capped_charges_total{policy=nickname}"] = 1
	metricstest.Want(t, series(t, m), want)
}
