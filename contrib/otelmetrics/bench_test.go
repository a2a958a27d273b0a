package otelmetrics

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
)

// BenchmarkMiddleware measures the allowed path of the root middleware on
// an in-memory token bucket (one key, never denied), without and with the
// metrics hook, in the same run: the difference is the hook's overhead.
func BenchmarkMiddleware(b *testing.B) {
	metricstest.BenchMiddleware(b, func(b *testing.B) (func(floodgate.DecisionEvent), func() float64) {
		m, reader := newMetrics(b)
		return m.Hook(), func() float64 {
			return points(b, reader)["floodgate.decisions{floodgate.outcome=allowed,floodgate.policy=default}"]
		}
	})
}

// BenchmarkHook measures the hook alone on an allowed decision.
func BenchmarkHook(b *testing.B) {
	m, _ := newMetrics(b)
	metricstest.BenchHook(b, m.Hook())
}

// BenchmarkTimedLimiter compares an in-memory decision with the same
// decision timed by Limiter: why timing is meant for Redis limiters.
func BenchmarkTimedLimiter(b *testing.B) {
	metricstest.BenchTimedLimiter(b, func(b *testing.B, name string, l floodgate.Limiter) (floodgate.Limiter, error) {
		m, _ := newMetrics(b)
		return m.Limiter(name, l)
	})
}

// BenchmarkHookOverhead reports the hook's overhead on the allowed path,
// from alternating rounds without and with it. Run it with
// -benchtime=1x.
func BenchmarkHookOverhead(b *testing.B) {
	m, _ := newMetrics(b)
	metricstest.BenchHookOverhead(b, m.Hook())
}
