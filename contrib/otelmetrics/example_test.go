package otelmetrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/otelmetrics"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The lines a service adds to count its limit's decisions and watch its
// store. A service with its OpenTelemetry SDK set up globally leaves out
// WithMeterProvider; here a ManualReader shows what an exporter would
// receive. WithPolicies declares the policy, so that its outcomes are
// reported at 0 before its first decision.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()

	m, err := otelmetrics.New(otelmetrics.WithPolicies("user_id_probe"),
		otelmetrics.WithMeterProvider(provider))
	if err != nil {
		panic(err)
	}
	probes, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 2, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	if err := m.Watch("probe", probes); err != nil {
		panic(err)
	}
	limit := floodgate.Middleware(probes,
		floodgate.WithPolicyName("user_id_probe"),
		floodgate.WithDecisionHook(m.Hook()))
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/auth/available/user_id", nil))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, mt := range rm.ScopeMetrics[0].Metrics {
		if mt.Name != "floodgate.decisions" {
			continue
		}
		for _, p := range mt.Data.(metricdata.Sum[int64]).DataPoints {
			if p.Value > 0 {
				policy, _ := p.Attributes.Value(otelmetrics.PolicyKey)
				outcome, _ := p.Attributes.Value(otelmetrics.OutcomeKey)
				fmt.Println(mt.Name, policy.AsString(), outcome.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// floodgate.decisions user_id_probe allowed 2
	// floodgate.decisions user_id_probe denied 1
}
