package metricstest

import (
	"context"
	"fmt"
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

// allowAll is the allowed path the benchmarks measure: the root
// middleware on an in-memory token bucket that never denies its one key,
// in front of an empty handler.
func allowAll(b *testing.B, opts ...floodgate.MiddlewareOption) http.Handler {
	b.Helper()
	tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1 << 24, Period: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return floodgate.Middleware(tb, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// BenchMiddleware measures the allowed path without and with hook, in
// the same run: the difference is the hook's overhead. newHook returns a
// fresh hook and a function that reads back how many allowed decisions
// of the "default" policy it counted, which must be all of them.
func BenchMiddleware(b *testing.B, newHook func(b *testing.B) (func(floodgate.DecisionEvent), func() float64)) {
	for _, hooked := range []bool{false, true} {
		name := "plain"
		if hooked {
			name = "hook"
		}
		b.Run(name, func(b *testing.B) {
			hook, counted := newHook(b)
			var opts []floodgate.MiddlewareOption
			if hooked {
				opts = append(opts, floodgate.WithDecisionHook(hook))
			}
			h := allowAll(b, opts...)
			r := httptest.NewRequest("GET", "/", nil)
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if hooked {
				if got := counted(); got != float64(b.N) {
					b.Fatalf("%v allowed decisions counted, want %d", got, b.N)
				}
			}
		})
	}
}

// BenchHook measures hook alone on an allowed decision.
func BenchHook(b *testing.B, hook func(floodgate.DecisionEvent)) {
	ev := floodgate.DecisionEvent{Policy: "default", Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		hook(ev)
	}
}

// BenchTimedLimiter compares an in-memory decision with the same
// decision timed by an adapter's Limiter (register): why timing is meant
// for Redis limiters.
func BenchTimedLimiter(b *testing.B, register func(b *testing.B, name string, l floodgate.Limiter) (floodgate.Limiter, error)) {
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
				if l, err = register(b, "mem", tb); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, _ = l.AllowN(ctx, "k", 1)
			}
		})
	}
}

// BenchHookOverhead alternates short rounds of the allowed path without
// and with hook, and reports the fastest round of each (the one least
// disturbed by other work on the machine) and the overhead between them:
// a comparison that holds on a noisy, shared machine, where two separate
// benchmarks do not. Run it with -benchtime=1x. Two paths: "one-key", the
// middleware's fastest (one client, so the decision stays in cache: the
// hook's worst case in relative terms), and "100k-clients", a store
// populated with 100,000 client addresses visited in turn, as a service
// with many clients sees it.
func BenchHookOverhead(b *testing.B, hook func(floodgate.DecisionEvent)) {
	for _, clients := range []int{1, 100_000} {
		name := "one-key"
		if clients > 1 {
			name = "100k-clients"
		}
		b.Run(name, func(b *testing.B) { benchHookOverhead(b, hook, clients) })
	}
}

func benchHookOverhead(b *testing.B, hook func(floodgate.DecisionEvent), clients int) {
	plain, hooked := allowAll(b), allowAll(b, floodgate.WithDecisionHook(hook))
	reqs := make([]*http.Request, clients)
	w := &discardWriter{h: make(http.Header)}
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1234", i>>16, i>>8&255, i&255)
		plain.ServeHTTP(w, reqs[i]) // populate both stores
		hooked.ServeHTTP(w, reqs[i])
	}
	const rounds, perRound = 300, 2000
	next := 0
	round := func(h http.Handler) float64 {
		start := time.Now()
		for range perRound {
			clear(w.h)
			h.ServeHTTP(w, reqs[next])
			if next++; next == clients {
				next = 0
			}
		}
		return float64(time.Since(start).Nanoseconds()) / perRound
	}
	b.ResetTimer()
	for range b.N {
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
