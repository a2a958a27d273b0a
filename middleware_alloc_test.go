//go:build !race

package floodgate

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// The middleware's own work allocates nothing once the header values of
// the current second are formatted, on the allowed path and on the
// denied path an attacker drives (issue 11 §3). The key function here
// allocates nothing either, so what is counted is the middleware's.
// (Not under the race detector, which allocates on its own.)
func TestMiddlewareHotPathsDoNotAllocate(t *testing.T) {
	constKey := func(*http.Request) (string, error) { return "203.0.113.7", nil }
	allowing := mustTokenBucket(t, Rate{Limit: 1 << 24, Period: time.Second})
	denying := mustTokenBucket(t, PerHour(1))
	for _, tt := range []struct {
		name   string
		lim    *TokenBucket
		status int
		style  HeaderStyle
	}{
		{"allowed", allowing, 0, HeadersIETF},
		{"denied", denying, http.StatusTooManyRequests, HeadersIETF},
		{"denied, both header styles", denying, http.StatusTooManyRequests, HeadersBoth},
	} {
		h := mustMiddleware(t, tt.lim, WithKeyFunc(constKey), WithHeaders(tt.style))(okHandler)
		r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		w := &benchWriter{h: make(http.Header, 8)}
		h.ServeHTTP(w, r) // format this second's values; spend the denying bucket
		allocs := testing.AllocsPerRun(1000, func() {
			w.reset()
			h.ServeHTTP(w, r)
		})
		if w.status != tt.status {
			t.Fatalf("%s: status %d, want %d", tt.name, w.status, tt.status)
		}
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per request, want 0", tt.name, allocs)
		}
	}
}

// The admission core allocates nothing of its own for a transport that is
// not HTTP either: keying, admitting and settling a call of a plain
// struct type, allowed or denied.
func TestGateDoesNotAllocate(t *testing.T) {
	for _, tt := range []struct {
		name string
		lim  *TokenBucket
		kind OutcomeKind
	}{
		{"allowed", mustTokenBucket(t, Rate{Limit: 1 << 24, Period: time.Second}), OutcomeAllowed},
		{"denied", mustTokenBucket(t, PerHour(1)), OutcomeDenied},
	} {
		g, sel := mustGate(t, tt.lim, WithRefundUncounted())
		ctx := context.Background()
		run := func() Outcome {
			c := sel.Call(call{client: "203.0.113.7"})
			c.Method, c.Path = "POST", "/pkg.Service/Method"
			out := g.Admit(ctx, c)
			g.Settle(ctx, out, Result{})
			return out
		}
		run() // format this second's values; spend the denying bucket
		var out Outcome
		allocs := testing.AllocsPerRun(1000, func() { out = run() })
		if out.Kind != tt.kind {
			t.Fatalf("%s: %s", tt.name, out.Kind)
		}
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per call, want 0", tt.name, allocs)
		}
	}
}
