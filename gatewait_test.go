package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// caller is the call type of these tests' imaginary transport: the key is
// the caller's name.
type caller string

func callerKey(c caller) (string, error) { return string(c), nil }

// waitGate returns a gate over lim that holds calls for their turn on
// clk's timers.
func waitGate(t *testing.T, lim floodgate.Limiter, clk *floodgatetest.Clock, w floodgate.WaitLimits) (*floodgate.Gate, *floodgate.SelectorFor[caller]) {
	t.Helper()
	sel, err := floodgate.NewSelectorFor(floodgate.PolicyFor[caller]{Name: "caller", Limiter: lim, Key: callerKey})
	if err != nil {
		t.Fatal(err)
	}
	g, err := floodgate.NewGate(sel, floodgate.WithWait(w), floodgate.WithWaitTimer(clk.After), floodgate.WithWallClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return g, sel
}

// waitFor waits, bounded, until cond holds: goroutines reaching their
// timers, not a refill (the clock stands still meanwhile).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// nginx's limit_req burst/delay: a burst of 20 on 10/s with a 1 s maximum
// wait lets 10 through at once and holds the other 10, which pass one per
// 100 ms, in the order they came; none is denied.
func TestWaitBurstPassesSpaced(t *testing.T) {
	clk := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	g, sel := waitGate(t, lim, clk, floodgate.WaitLimits{MaxWait: time.Second, PerKey: 20, Total: 100})
	type result struct {
		out floodgate.Outcome
		at  time.Duration // clock time when Admit returned, since the start
	}
	start := clk.Now()
	results := make(chan result, 20)
	for i := 0; i < 20; i++ {
		go func() {
			out := g.Admit(context.Background(), sel.Call("ann"))
			results <- result{out, clk.Now().Sub(start)}
		}()
	}
	var got []result
	for len(got) < 10 { // those served at once
		got = append(got, <-results)
	}
	waitFor(t, "10 calls waiting", func() bool { return g.Waiting() == 10 && clk.Timers() == 10 })
	for step := 1; step <= 10; step++ {
		clk.Advance(100 * time.Millisecond)
		got = append(got, <-results)
		if w := g.Waiting(); w != 10-step {
			t.Fatalf("after %d × 100 ms: %d waiting, want %d", step, w, 10-step)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].out.Waited < got[j].out.Waited })
	for i, r := range got {
		want := time.Duration(max(i-9, 0)) * 100 * time.Millisecond
		if r.out.Kind != floodgate.OutcomeAllowed || r.out.Blocked || r.out.Waited != want || r.at != want {
			t.Errorf("call %d: %s, blocked %v, waited %v, done at +%v; want allowed after %v", i, r.out.Kind, r.out.Blocked, r.out.Waited, r.at, want)
		}
	}
	// The bucket is exactly empty: the next call would wait 100 ms more.
	if d, _ := lim.AllowN(context.Background(), "ann", 1); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Errorf("after the burst: %+v, want denied for 100ms", d)
	}
}

// Beyond the bounds a call is refused at once, with an honest
// Retry-After: a turn further than MaxWait, more waiting calls of a key
// than PerKey, more waiting calls in all than Total. A refused call
// books nothing.
func TestWaitBoundsRefuseAtOnce(t *testing.T) {
	tests := []struct {
		name   string
		limits floodgate.WaitLimits
		// waiting is how many calls of ann and bob wait before the probe
		waitAnn, waitBob int
		probe            caller
		retry            time.Duration
	}{
		// 10 wait (100 ms … 1 s); the 11th's turn is 1.1 s off.
		{"MaxWait", floodgate.WaitLimits{MaxWait: time.Second, PerKey: 50, Total: 50}, 10, 0, "ann", 1100 * time.Millisecond},
		// 3 wait; the 4th's turn is 400 ms off, within MaxWait.
		{"PerKey", floodgate.WaitLimits{MaxWait: time.Second, PerKey: 3, Total: 50}, 3, 0, "ann", 400 * time.Millisecond},
		// 2 of ann and 2 of bob wait; bob's 3rd's turn is 300 ms off.
		{"Total", floodgate.WaitLimits{MaxWait: time.Second, PerKey: 10, Total: 4}, 2, 2, "bob", 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			g, sel := waitGate(t, lim, clk, tt.limits)
			for _, k := range []string{"ann", "bob"} { // empty both buckets
				if d, _ := lim.AllowN(context.Background(), k, 10); !d.Allowed {
					t.Fatal("could not empty the bucket")
				}
			}
			var wg sync.WaitGroup
			for i := 0; i < tt.waitAnn+tt.waitBob; i++ {
				who := caller("ann")
				if i >= tt.waitAnn {
					who = "bob"
				}
				wg.Add(1)
				go func() { defer wg.Done(); g.Admit(context.Background(), sel.Call(who)) }()
				waitFor(t, "the call to wait", func() bool { return g.Waiting() == i+1 })
			}
			out := g.Admit(context.Background(), sel.Call(tt.probe))
			if out.Kind != floodgate.OutcomeDenied || !out.Blocked || out.Waited != 0 || out.Decision.RetryAfter != tt.retry {
				t.Errorf("probe: %s, blocked %v, waited %v, retry after %v; want denied at once, retry after %v",
					out.Kind, out.Blocked, out.Waited, out.Decision.RetryAfter, tt.retry)
			}
			if ra, want := out.Quota.RetryAfter(), fmt.Sprint(floodgate.RetryAfterSeconds(tt.retry)); len(ra) != 1 || ra[0] != want {
				t.Errorf("Retry-After %v, want [%s]", ra, want)
			}
			clk.Advance(2 * time.Second) // wake the waiters
			wg.Wait()
			// The refused probe booked nothing: after the waiters' turns and
			// 2 s of refill, the bucket is full again.
			if d, _ := lim.AllowN(context.Background(), string(tt.probe), 0); d.Remaining != 10 {
				t.Errorf("after the waiters: %d tokens left, want 10 (the refused call booked some)", d.Remaining)
			}
		})
	}
}

// A client that hangs up while waiting gives its turn back: the next
// caller gets the same wait, and the hung-up call never reaches a handler
// (OutcomeHungUp, blocked) — also under fail-open.
func TestWaitHangUpGivesTheTurnBack(t *testing.T) {
	clk := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := floodgate.NewSelectorFor(floodgate.PolicyFor[caller]{Name: "caller", Limiter: lim, Key: callerKey})
	if err != nil {
		t.Fatal(err)
	}
	g, err := floodgate.NewGate(sel, floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, PerKey: 5, Total: 5}),
		floodgate.WithWaitTimer(clk.After), floodgate.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowN(context.Background(), "ann", 10); !d.Allowed {
		t.Fatal("could not empty the bucket")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan floodgate.Outcome)
	go func() { done <- g.Admit(ctx, sel.Call("ann")) }()
	waitFor(t, "the call to wait", func() bool { return g.Waiting() == 1 })
	cancel()
	out := <-done
	if out.Kind != floodgate.OutcomeHungUp || !out.Blocked || !errors.Is(out.Err, context.Canceled) {
		t.Fatalf("hung-up waiter: %s, blocked %v, err %v; want hung up, blocked", out.Kind, out.Blocked, out.Err)
	}
	if g.Waiting() != 0 || clk.Timers() != 0 {
		t.Fatalf("after the hang-up: %d waiting, %d timers, want 0", g.Waiting(), clk.Timers())
	}
	// Its 100 ms turn is free again: the next caller gets it, not 200 ms.
	go func() { done <- g.Admit(context.Background(), sel.Call("ann")) }()
	waitFor(t, "the next call to wait", func() bool { return clk.Timers() == 1 })
	clk.Advance(100 * time.Millisecond)
	if out := <-done; out.Kind != floodgate.OutcomeAllowed || out.Waited != 100*time.Millisecond {
		t.Fatalf("next call: %s after %v, want allowed after 100ms", out.Kind, out.Waited)
	}
}

// A call whose deadline comes before its turn is refused at once rather
// than held to fail anyway, and books nothing.
func TestWaitDeadlineBeforeTurnRefusedAtOnce(t *testing.T) {
	clk := floodgatetest.NewClock(time.Now())
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	g, sel := waitGate(t, lim, clk, floodgate.WaitLimits{MaxWait: time.Second, PerKey: 5, Total: 5})
	if d, _ := lim.AllowN(context.Background(), "ann", 10); !d.Allowed {
		t.Fatal("could not empty the bucket")
	}
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(50*time.Millisecond))
	defer cancel()
	out := g.Admit(ctx, sel.Call("ann"))
	if out.Kind != floodgate.OutcomeDenied || out.Decision.RetryAfter != 100*time.Millisecond || g.Waiting() != 0 {
		t.Fatalf("%s, retry after %v, %d waiting; want denied at once, retry after 100ms", out.Kind, out.Decision.RetryAfter, g.Waiting())
	}
	if d, _ := lim.AllowN(context.Background(), "ann", 0); d.ResetAfter != time.Second {
		t.Errorf("the refused call booked: the bucket is full in %v, want 1s", d.ResetAfter)
	}
}

// A flood of callers cannot pile up waiting goroutines: with Total 64,
// 2,000 concurrent calls of 200 keys never have more than 64 waiting, the
// rest are refused at once, and once the turns have passed nothing is
// left (no waiting call, no timer, the goroutines gone).
func TestWaitFloodStaysBounded(t *testing.T) {
	clk := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithBurst(1), floodgate.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	g, sel := waitGate(t, lim, clk, floodgate.WaitLimits{MaxWait: time.Second, PerKey: 2, Total: 64})
	before := runtime.NumGoroutine()
	var (
		wg                      sync.WaitGroup
		mu                      sync.Mutex
		allowed, denied, peakNo int
	)
	for i := 0; i < 2000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := g.Admit(context.Background(), sel.Call(caller(fmt.Sprint("client-", i%200))))
			mu.Lock()
			defer mu.Unlock()
			peakNo = max(peakNo, g.Waiting())
			if out.Kind == floodgate.OutcomeAllowed {
				allowed++
			} else {
				denied++
			}
		}()
	}
	waitFor(t, "the flood to settle into waiting", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return allowed+denied+g.Waiting() == 2000
	})
	if w := g.Waiting(); w > 64 {
		t.Fatalf("%d calls waiting, want at most 64", w)
	}
	for clk.Timers() > 0 {
		clk.Advance(100 * time.Millisecond)
	}
	wg.Wait()
	// 200 keys: the first call of each passes at once (burst 1); 64
	// more wait their turn at most.
	if allowed > 200+64 || allowed < 200 || allowed+denied != 2000 || peakNo > 64 {
		t.Errorf("allowed %d, denied %d, peak waiting %d; want 200..264 allowed, the rest denied, at most 64 waiting", allowed, denied, peakNo)
	}
	t.Logf("2,000 concurrent calls of 200 keys, Total 64: %d allowed (%d after waiting), %d refused at once, at most %d waiting at any moment",
		allowed, allowed-200, denied, peakNo)
	waitFor(t, "the callers' goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if g.Waiting() != 0 || clk.Timers() != 0 {
		t.Errorf("after the flood: %d waiting, %d timers", g.Waiting(), clk.Timers())
	}
}

// Through the net/http middleware, a held request reaches the handler
// after its turn with the quota headers of its booking.
func TestWaitMiddleware(t *testing.T) {
	clk := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(2), floodgate.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()),
		floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, PerKey: 4, Total: 4}), floodgate.WithWaitTimer(clk.After))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	codes := make(chan int, 4)
	for i := 0; i < 4; i++ {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			codes <- rec.Code
		}()
	}
	waitFor(t, "two requests to wait", func() bool { return clk.Timers() == 2 })
	rec := httptest.NewRecorder() // a fifth: its turn is 1.5 s off
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" {
		t.Errorf("fifth request: %d, Retry-After %q; want 429, 2", rec.Code, rec.Header().Get("Retry-After"))
	}
	clk.Advance(time.Second)
	for i := 0; i < 4; i++ {
		if c := <-codes; c != http.StatusNoContent {
			t.Errorf("request %d: %d, want 204", i, c)
		}
	}
}

// Impossible waiting configurations are refused at construction: bounds
// that are not positive, a wait beyond MaxWaitLimit, a timer without
// WithWait, a limiter that cannot book ahead (a sliding log, an in-flight
// limit, All with one of them).
func TestWaitRefusedConfigurations(t *testing.T) {
	bucket := mustTokenBucketX(t, floodgate.PerSecond(10))
	log, err := floodgate.NewSlidingLog(floodgate.PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := floodgate.All(bucket, log)
	if err != nil {
		t.Fatal(err)
	}
	ok := floodgate.WaitLimits{MaxWait: time.Second, PerKey: 1, Total: 1}
	for name, c := range map[string]struct {
		l    floodgate.Limiter
		opts []floodgate.MiddlewareOption
	}{
		"MaxWait 0":        {bucket, []floodgate.MiddlewareOption{floodgate.WithWait(floodgate.WaitLimits{PerKey: 1, Total: 1})}},
		"MaxWait too long": {bucket, []floodgate.MiddlewareOption{floodgate.WithWait(floodgate.WaitLimits{MaxWait: 2 * time.Hour, PerKey: 1, Total: 1})}},
		"PerKey 0":         {bucket, []floodgate.MiddlewareOption{floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, Total: 1})}},
		"Total 0":          {bucket, []floodgate.MiddlewareOption{floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, PerKey: 1})}},
		"timer alone":      {bucket, []floodgate.MiddlewareOption{floodgate.WithWaitTimer(floodgatetest.NewClock(time.Now()).After)}},
		"sliding log":      {log, []floodgate.MiddlewareOption{floodgate.WithWait(ok)}},
		"in-flight":        {mustInFlight(t, 3), []floodgate.MiddlewareOption{floodgate.WithWait(ok)}},
		"All with a log":   {mixed, []floodgate.MiddlewareOption{floodgate.WithWait(ok)}},
	} {
		if _, err := floodgate.NewMiddleware(c.l, c.opts...); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := floodgate.NewMiddleware(bucket, floodgate.WithWait(ok)); err != nil {
		t.Errorf("a token bucket: %v", err)
	}
}
