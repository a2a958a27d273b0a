package prommetrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// The lines a service adds to count its limit's decisions and watch its
// store: build with its policy names, register, hook in, watch. The
// declared policy's series are there at 0 before its first decision, so
// that Prometheus's increase() and rate() count that first burst.
func Example() {
	m, err := prommetrics.New(prommetrics.WithPolicies("user_id_probe"))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry() // or prometheus.MustRegister(m)
	reg.MustRegister(m)

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

	// What GET /metrics (promhttp.HandlerFor(reg, …)) shows.
	show := func(when string) {
		fmt.Println(when)
		families, _ := reg.Gather()
		var b strings.Builder
		for _, f := range families {
			if f.GetName() == "floodgate_decisions_total" || f.GetName() == "floodgate_store_keys" {
				_, _ = expfmt.MetricFamilyToText(&b, f)
			}
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				fmt.Println(line)
			}
		}
	}
	show("before the first request:")
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/auth/available/user_id", nil))
	}
	show("after three:")
	// Output:
	// before the first request:
	// floodgate_decisions_total{outcome="allowed",policy="user_id_probe"} 0
	// floodgate_decisions_total{outcome="denied",policy="user_id_probe"} 0
	// floodgate_decisions_total{outcome="dry_run_denied",policy="user_id_probe"} 0
	// floodgate_decisions_total{outcome="error",policy="user_id_probe"} 0
	// floodgate_store_keys{limiter="probe"} 0
	// after three:
	// floodgate_decisions_total{outcome="allowed",policy="user_id_probe"} 2
	// floodgate_decisions_total{outcome="denied",policy="user_id_probe"} 1
	// floodgate_decisions_total{outcome="dry_run_denied",policy="user_id_probe"} 0
	// floodgate_decisions_total{outcome="error",policy="user_id_probe"} 0
	// floodgate_store_keys{limiter="probe"} 1
}
