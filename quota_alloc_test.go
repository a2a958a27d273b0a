//go:build !race

package floodgate

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/interleave"
)

// drainingRate is a quota each call spends for good (issue 31): its
// remaining count, and so its RateLimit value, changes on every call,
// and every legacy Remaining value with it.
var drainingRate = Rate{Limit: 1 << 24, Period: 30 * 24 * time.Hour}

// Under a quota that drains, the quota values change on every request,
// so no table of recent values serves them: each is formatted. They are
// carved from blocks of values, so the middleware's allowed path still
// allocates no more than a block's share (2 allocations a block of 32
// values: 0.0625 a value) — where values made one by one cost 2 each,
// and the tables' entries one more (issue 31).
func TestMiddlewareDrainingQuotaAllocations(t *testing.T) {
	constKey := func(*http.Request) (string, error) { return "203.0.113.7", nil }
	for _, tt := range []struct {
		style  HeaderStyle
		values float64 // values formatted per request, about
	}{
		{HeadersIETF, 1},     // RateLimit
		{HeadersLegacy, 1.2}, // X-RateLimit-Remaining, and Reset every few requests
		{HeadersBoth, 2.2},
	} {
		h := mustMiddleware(t, mustTokenBucket(t, drainingRate), WithKeyFunc(constKey), WithHeaders(tt.style))(okHandler)
		r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		w := &benchWriter{h: make(http.Header, 8)}
		var lastIETF, lastLegacy []string
		changed := 0
		allocs := interleave.MallocsPerRun(3200, func() {
			w.reset()
			h.ServeHTTP(w, r)
			// Read by canonical key: Header.Get would allocate.
			ietf, legacy := w.h["Ratelimit"], w.h["X-Ratelimit-Remaining"]
			if !slices.Equal(ietf, lastIETF) || !slices.Equal(legacy, lastLegacy) {
				changed++
			}
			lastIETF, lastLegacy = ietf, legacy
		})
		if w.status != 0 || changed < 3200 {
			t.Fatalf("style %d: status %d, values changed on %d of 3201 requests: not draining", tt.style, w.status, changed)
		}
		if limit := tt.values*2/blockValues + 0.01; allocs > limit { // made one by one: 2 a value
			t.Errorf("style %d: %.3f allocations per request, want at most %.3f", tt.style, allocs, limit)
		}
	}
}

// The admission core formats no value an adapter does not ask for: a
// gRPC call allowed under grpclimit's default, which sends no quota,
// costs no formatting however the quota moves (issue 31).
func TestGateFormatsOnlyWhatIsAsked(t *testing.T) {
	g, sel := mustGate(t, mustTokenBucket(t, drainingRate), WithHeaders(HeadersBoth))
	ctx := context.Background()
	var out Outcome
	allocs := interleave.MallocsPerRun(1000, func() {
		c := sel.Call(call{client: "203.0.113.7"})
		c.Method, c.Path = "POST", "/pkg.Service/Method"
		out = g.Admit(ctx, c)
	})
	if out.Kind != OutcomeAllowed {
		t.Fatalf("%s", out.Kind)
	}
	if allocs > 0.005 { // a few in a thousand calls are not the call's (the runtime)
		t.Errorf("%.4f allocations per call, want 0", allocs)
	}
	// Asked, the values are there, and those of the next call differ.
	first := out.Quota.RateLimit()[0] + " " + out.Quota.Remaining()[0]
	c := sel.Call(call{client: "203.0.113.7"})
	next := g.Admit(ctx, c)
	if second := next.Quota.RateLimit()[0] + " " + next.Quota.Remaining()[0]; second == first {
		t.Errorf("two calls of a draining quota sent the same values %q", first)
	}
}
