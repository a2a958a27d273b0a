package otelmetrics

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// component is one dot-delimited part of a name: lowercase snake_case,
// starting with a letter and ending with a letter or digit.
var component = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// namingProblems lists where an instrument breaks OpenTelemetry's naming
// rules for metrics (semantic conventions, general/naming.md, "Metrics"
// and "General naming considerations"):
//
//   - lowercase, dot-delimited namespaces, snake_case words, under the
//     library's own namespace, floodgate;
//   - namespaces are not pluralized (redis is a name, not a plural);
//   - no total, on any instrument;
//   - an UpDownCounter is not pluralized: it counts with .count and
//     states its known total with .limit (system.process.count,
//     system.memory.limit);
//   - a counter is pluralized when, and only when, its unit counts
//     discrete things: {fault} is counted by ….faults (or ….lost_faults);
//   - a duration is a histogram in seconds named ….duration.
func namingProblems(name, kind, unit string) []string {
	var out []string
	parts := strings.Split(name, ".")
	if parts[0] != "floodgate" {
		out = append(out, "not under the floodgate namespace")
	}
	for i, p := range parts {
		if !component.MatchString(p) {
			out = append(out, "component "+p+" is not lowercase snake_case")
		}
		if p == "total" || strings.HasSuffix(p, "_total") {
			out = append(out, "uses total")
		}
		if i < len(parts)-1 && strings.HasSuffix(p, "s") && p != "redis" {
			out = append(out, "namespace "+p+" is pluralized")
		}
	}
	last := parts[len(parts)-1]
	switch kind {
	case "updowncounter":
		if last != "count" && last != "limit" {
			out = append(out, "an UpDownCounter ends with count or limit, not "+last)
		}
	case "counter":
		if thing, ok := strings.CutPrefix(unit, "{"); !ok || !strings.HasSuffix(last, strings.TrimSuffix(thing, "}")+"s") {
			out = append(out, "a counter of "+unit+" is not named for it in the plural")
		}
	case "histogram":
		if last != "duration" || unit != "s" {
			out = append(out, "a histogram of time is ….duration in s")
		}
	}
	return out
}

// TestInstrumentNames collects every instrument, with a Redis limiter
// falling back to a watched in-memory one, a leasing Redis limiter, a
// watched gate, a Redis in-flight limit and a declared policy, and checks
// that all twenty-one are there and that each
// name follows OpenTelemetry's naming rules.
func TestInstrumentNames(t *testing.T) {
	m, reader := newMetrics(t, WithPolicies("probe"))
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
	if err := m.Watch("leased", newRedisBucket(t, redisstore.WithLease(redisstore.Lease{}))); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchGate("api", &floodgate.GateStats{}); err != nil {
		t.Fatal(err)
	}
	slots, err := redisstore.NewInFlight(metricstest.DownServer{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slots.Close() })
	if err := m.Watch("slots", slots); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			kind := "gauge"
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				kind = "updowncounter"
				if d.IsMonotonic {
					kind = "counter"
				}
			case metricdata.Histogram[float64]:
				kind = "histogram"
			}
			seen[mt.Name] = true
			for _, p := range namingProblems(mt.Name, kind, mt.Unit) {
				t.Errorf("%s (%s, %s): %s", mt.Name, kind, mt.Unit, p)
			}
		}
	}
	for name := range units {
		if !seen[name] {
			t.Errorf("%s not collected", name)
		}
	}
	if len(seen) != len(units) {
		t.Errorf("collected %d instruments, want %d", len(seen), len(units))
	}
}

// TestNamingRulesCatchOldNames: the rules refuse the names this module
// used before it followed them, so the test above can fail.
func TestNamingRulesCatchOldNames(t *testing.T) {
	for _, tt := range []struct{ name, kind, unit string }{
		{"floodgate.store.keys", "updowncounter", "{key}"},
		{"floodgate.store.keys.max", "updowncounter", "{key}"},
		{"floodgate.store.debts.capacity", "updowncounter", "{debt}"},
		{"floodgate.store.debts.lost", "counter", "{debt}"},
		{"floodgate.store.evictions", "counter", "{key}"},
		{"floodgate.redis.deny_cache.hits", "counter", "{decision}"},
		{"floodgate_decisions_total", "counter", "{decision}"},
		{"floodgate.decision.latency", "histogram", "ms"},
	} {
		if len(namingProblems(tt.name, tt.kind, tt.unit)) == 0 {
			t.Errorf("%s (%s, %s) passes the naming rules", tt.name, tt.kind, tt.unit)
		}
	}
}
