package benchmarks

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// populatedKeys is the size of the key set of the "many keys" cases.
const populatedKeys = 100_000

// hotKey is the single client of the hot-key cases.
const hotKey = "203.0.113.7"

// build makes p's limiter for q and stops it when the benchmark ends.
func build(tb testing.TB, p peer, q quota) instance {
	tb.Helper()
	inst, err := p.build(q)
	if err != nil {
		tb.Fatalf("%s: %v", p.name, err)
	}
	tb.Cleanup(inst.stop)
	return inst
}

// populate makes one decision for each key, all of which must be allowed.
func populate(tb testing.TB, p peer, call caller, keys []string) {
	tb.Helper()
	for _, k := range keys {
		if ok, err := call(k); err != nil || !ok {
			tb.Fatalf("%s: populating %q: allowed=%v err=%v, want allowed", p.name, k, ok, err)
		}
	}
}

// clientIPs returns n distinct client addresses.
func clientIPs(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = clientIP(i)
	}
	return keys
}

// okHandler is the application behind each middleware: it answers 200.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// newProbe returns the request of the middleware cases: the design's
// username-availability probe.
func newProbe() *http.Request {
	return httptest.NewRequest(http.MethodGet, "/auth/available/user_id?userId=alice", nil)
}
