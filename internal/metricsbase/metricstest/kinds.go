package metricstest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// HoldWaiting builds a middleware over a bucket of one request a second,
// on a fake clock, that holds calls for their turn (floodgate.WithWait)
// and reports to s, and sends it n+1 requests at once: one is served,
// the n others wait. It returns once s reports them waiting, with a
// function that moves the clock until every one has been served.
func HoldWaiting(t *testing.T, s *floodgate.GateStats, n int) (release func()) {
	t.Helper()
	clk := floodgatetest.NewClock(T0)
	mw, err := floodgate.NewMiddleware(NewBucket(t, floodgate.PerSecond(1), clk),
		floodgate.WithKeyFunc(floodgate.KeyByMethod()),
		floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Minute, PerKey: n, Total: n}),
		floodgate.WithWaitTimer(clk.After), floodgate.WithGateStats(s))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	var wg sync.WaitGroup
	for range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}()
	}
	waitUntil(t, "the calls to wait", func() bool { return s.Waiting() == n && clk.Timers() == n })
	return func() {
		clk.Advance(time.Duration(n) * time.Second)
		wg.Wait()
	}
}

// HoldSlots takes n slots of l, an in-flight limit, for n keys, and
// returns a function that releases them.
func HoldSlots(t *testing.T, l floodgate.Limiter, n int) (release func()) {
	t.Helper()
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = string(rune('a' + i))
		if d, err := l.AllowN(ctx, keys[i], 1); err != nil || !d.Allowed {
			t.Fatalf("taking a slot for %q: %+v, %v", keys[i], d, err)
		}
	}
	return func() {
		for _, k := range keys {
			if err := l.(floodgate.Releaser).ReleaseN(ctx, k, 1, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitUntil polls cond, yielding, for up to 10 s of real time: for
// goroutines to reach a state, never for a refill (the clock is fake).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
