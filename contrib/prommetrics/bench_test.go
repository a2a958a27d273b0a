package prommetrics

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// discardWriter is the cheapest ResponseWriter, so that the benchmarks
// measure the middleware, not a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkMiddleware measures the allowed path of the root middleware on
// an in-memory token bucket (one key, never denied), without and with the
// metrics hook, in the same run: the difference is the hook's overhead.
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		hook bool
	}{{"plain", false}, {"hook", true}} {
		b.Run(bc.name, func(b *testing.B) {
			m := newMetrics(b)
			tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1 << 24, Period: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			var opts []floodgate.MiddlewareOption
			if bc.hook {
				opts = append(opts, floodgate.WithDecisionHook(m.Hook()))
			}
			h := floodgate.Middleware(tb, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
				n++
			}
			if bc.hook {
				if got := only(series(b, m), "floodgate_decisions_total{outcome=allowed")["floodgate_decisions_total{outcome=allowed,policy=default}"]; got != float64(n) {
					b.Fatalf("%v allowed decisions counted, want %d", got, n)
				}
			}
		})
	}
}

// BenchmarkHook measures the hook alone on an allowed decision.
func BenchmarkHook(b *testing.B) {
	m := newMetrics(b)
	hook := m.Hook()
	ev := floodgate.DecisionEvent{Policy: "default", Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	b.ReportAllocs()
	for b.Loop() {
		hook(ev)
	}
}

// BenchmarkTimedLimiter compares an in-memory decision with the same
// decision timed by Limiter: why timing is meant for Redis limiters.
func BenchmarkTimedLimiter(b *testing.B) {
	for _, timed := range []bool{false, true} {
		name := "memory"
		if timed {
			name = "memory-timed"
		}
		b.Run(name, func(b *testing.B) {
			var l floodgate.Limiter
			tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1 << 24, Period: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			l = tb
			if timed {
				if l, err = newMetrics(b).Limiter("mem", tb); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.AllowN(ctx, "k", 1)
			}
		})
	}
}

// BenchmarkHookOverhead alternates short rounds of the allowed path
// without and with the hook, and reports the fastest round of each (the
// one least disturbed by other work on the machine) and the overhead
// between them: a comparison that holds on a noisy, shared machine, where
// two separate benchmarks do not. Run it with -benchtime=1x.
func BenchmarkHookOverhead(b *testing.B) {
	m := newMetrics(b)
	newHandler := func(opts ...floodgate.MiddlewareOption) http.Handler {
		tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1 << 24, Period: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		return floodgate.Middleware(tb, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	plain, hooked := newHandler(), newHandler(floodgate.WithDecisionHook(m.Hook()))
	r := httptest.NewRequest("GET", "/", nil)
	w := &discardWriter{h: make(http.Header)}
	const rounds, perRound = 300, 2000
	round := func(h http.Handler) float64 {
		start := time.Now()
		for range perRound {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
		return float64(time.Since(start).Nanoseconds()) / perRound
	}
	for b.Loop() {
		best := [2]float64{math.Inf(1), math.Inf(1)}
		for i := range rounds {
			// Alternate which goes first, so neither always runs warm.
			hs := [2]http.Handler{plain, hooked}
			for j := range 2 {
				k := (i + j) % 2
				best[k] = min(best[k], round(hs[k]))
			}
		}
		b.ReportMetric(best[0], "plain-ns/req")
		b.ReportMetric(best[1], "hook-ns/req")
		b.ReportMetric(100*(best[1]-best[0])/best[0], "overhead-%")
	}
}
