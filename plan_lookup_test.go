package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// hangingResolver answers known keys from a book at once and hangs every
// other key's lookup, ignoring its context, until released: a database
// an attacker has made slow, or a resolver that forgets its deadline.
type hangingResolver struct {
	book    *planBook
	release chan struct{}
	hanging atomic.Int64   // lookups in the resolver now
	most    atomic.Int64   // the most at once
	calls   sync.WaitGroup // lookups that have not returned
	known   func(key string) bool
}

func newHangingResolver(book *planBook, known ...string) *hangingResolver {
	set := map[string]bool{}
	for _, k := range known {
		set[k] = true
	}
	return &hangingResolver{book: book, release: make(chan struct{}), known: func(k string) bool { return set[k] }}
}

func (h *hangingResolver) resolve(ctx context.Context, key string) (floodgate.Plan, error) {
	if h.known(key) {
		return h.book.resolve(ctx, key)
	}
	h.calls.Add(1)
	defer h.calls.Done()
	n := h.hanging.Add(1)
	defer h.hanging.Add(-1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	<-h.release // the context's end is ignored
	return h.book.resolve(ctx, key)
}

// until waits, yielding, for cond; it fails the test after 10 s, which
// no correct run comes near (the machine's load aside).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting, after 10 s, for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// within runs f and fails the test if it has not returned after 10 s:
// a call that must not wait for a resolver that hangs.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	c := make(chan T, 1)
	go func() { c <- f() }()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10 s for a resolver that hangs", what)
		panic("unreachable")
	}
}

type decided struct {
	d   floodgate.Decision
	err error
}

// TestPlanLookupCapacityIsNotAnOutage: made-up API keys sprayed at a
// PlanLimiter whose lookups are slow fill every lookup slot; the keys
// past them are refused for capacity. That is no failure of the limiter
// for fail-open to forgive: under WithFailOpen none of them reaches the
// handler (each gets 503 with Retry-After, a busy service), and the
// customer the cache knows is served throughout. They used to pass as an
// outage: 191 to 236 of 300.
func TestPlanLookupCapacityIsNotAnOutage(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	res := newHangingResolver(newPlanBook(map[string]floodgate.Plan{"key-ann": proPlan}), "key-ann")
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: res.resolve,
		New: floodgate.TokenBucketPlans(floodgate.WithClock(clock.Now)), MaxLookups: 4, LookupTimeout: time.Hour, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := floodgate.NewMiddleware(plans, floodgate.WithKeyFunc(apiKey), floodgate.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	call := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := call("key-ann"); w.Code != http.StatusOK {
		t.Fatalf("the customer before the spray: %d", w.Code)
	}
	first := make(chan int, 4)
	for i := range 4 {
		go func() { first <- call(fmt.Sprintf("made-up-%d", i)).Code }()
	}
	until(t, "four lookups in the resolver", func() bool { return res.hanging.Load() == 4 })
	for i := 4; i < 300; i++ {
		w := within(t, "a made-up key past MaxLookups", func() *httptest.ResponseRecorder { return call(fmt.Sprintf("made-up-%d", i)) })
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("made-up key %d past MaxLookups: %d, Retry-After %q; want 503 with Retry-After", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if w := call("key-ann"); w.Code != http.StatusOK {
		t.Fatalf("the customer during the spray: %d", w.Code)
	}
	d, err := plans.Allow(context.Background(), "made-up-x")
	if err != nil || d.Allowed || !d.Overloaded || d.RetryAfter <= 0 {
		t.Fatalf("a lookup refused for capacity, asked directly: %+v, %v; want a denial marked Overloaded, with a wait", d, err)
	}
	// Keyed through KnownKey, the refusal is the key function's error,
	// which fail-open does not let through either.
	sel, err := floodgate.NewPolicySelector(floodgate.Policy{Name: "customer", Limiter: plans, Key: plans.KnownKey(apiKey)})
	if err != nil {
		t.Fatal(err)
	}
	known, err := floodgate.NewPolicyMiddleware(sel, floodgate.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "made-up-y")
	w := httptest.NewRecorder()
	known(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })).ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a made-up key through KnownKey past MaxLookups: %d, want 503", w.Code)
	}
	close(res.release)
	for range 4 {
		if code := <-first; code != http.StatusBadRequest {
			t.Errorf("a made-up key whose lookup answered ErrNoPlan: %d, want 400", code)
		}
	}
	if n := served.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (the customer's): made-up keys got through", n)
	}
}

// TestPlanLookupDeadlineHoldsWhateverTheResolver: a resolver that ignores
// its context does not hold a decision past LookupTimeout: the decision
// is refused then as a busy service (Overloaded; 503 behind the
// middleware, under fail-open too); a later one for
// the same key fails at once instead of waiting again, and so does one
// whose own context has ended. A resolver that hangs holds one lookup
// slot each, at most MaxLookups of them: past that, lookups are refused
// (Overloaded) instead of starting more goroutines. Its late answer is
// cached when it comes: the key is then decided on the plan found,
// without another lookup. The decision used to wait for the resolver (1.5 s
// against a 50 ms timeout) and then allow.
func TestPlanLookupDeadlineHoldsWhateverTheResolver(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	book := newPlanBook(map[string]floodgate.Plan{"k": proPlan, "h-0": proPlan, "h-1": proPlan, "h-2": proPlan})
	res := newHangingResolver(book)
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: res.resolve,
		New: floodgate.TokenBucketPlans(floodgate.WithClock(clock.Now)), MaxLookups: 2, LookupTimeout: 20 * time.Millisecond, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := func(ctx context.Context, key string) decided {
		return within(t, key, func() decided { d, err := plans.Allow(ctx, key); return decided{d, err} })
	}
	for i, what := range []string{"the decision that starts the lookup", "a later decision of the key"} {
		r := allow(ctx, "k")
		if r.err != nil || r.d.Allowed || !r.d.Overloaded || r.d.RetryAfter != 20*time.Millisecond {
			t.Fatalf("%d, %s: %+v, %v; want an Overloaded denial at the lookup's deadline, retry after LookupTimeout", i, what, r.d, r.err)
		}
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if r := allow(gone, "k"); r.d.Allowed || r.err == nil {
		t.Fatalf("a caller whose context has ended: %+v, %v", r.d, r.err)
	}
	limit, err := floodgate.NewMiddleware(plans, floodgate.WithKeyFunc(func(*http.Request) (string, error) { return "k", nil }))
	if err != nil {
		t.Fatal(err)
	}
	w := within(t, "behind the middleware", func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler ran") })).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w
	})
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("behind the middleware: %d, want 503", w.Code)
	}
	// One more key hangs in the second slot; the third finds none.
	if r := allow(ctx, "h-0"); r.err != nil || r.d.Allowed || !r.d.Overloaded {
		t.Fatalf("h-0: %+v, %v", r.d, r.err)
	}
	for _, key := range []string{"h-1", "h-2"} {
		if r := allow(ctx, key); r.err != nil || r.d.Allowed || !r.d.Overloaded {
			t.Fatalf("%s, with every lookup slot held by a hanging resolver: %+v, %v; want Overloaded", key, r.d, r.err)
		}
	}
	if n := res.most.Load(); n != 2 {
		t.Fatalf("%d lookups in the resolver at once, want MaxLookups (2)", n)
	}
	close(res.release)
	res.calls.Wait()
	lookups := book.lookups.Load()
	until(t, "the late answer cached", func() bool {
		d, err := plans.AllowN(ctx, "k", 0)
		return err == nil && d.Limit == proPlan.Rate.Limit
	})
	if d, err := plans.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != proPlan.Rate.Limit-1 {
		t.Fatalf("after the late answer: %+v, %v; want pro's quota less one", d, err)
	}
	if n := book.lookups.Load(); n != lookups {
		t.Fatalf("%d more lookups after the late answer, want none: it was cached", n-lookups)
	}
}

// flakyResolver is a planBook that can be made to fail or to hang (until
// released) for every key, and counts what it answered.
type flakyResolver struct {
	*planBook
	mode    atomic.Int32 // 0 answers, 1 fails, 2 hangs
	release chan struct{}
}

func (f *flakyResolver) resolve(ctx context.Context, key string) (floodgate.Plan, error) {
	switch f.mode.Load() {
	case 1:
		f.lookups.Add(1)
		return floodgate.Plan{}, errors.New("database down")
	case 2:
		f.lookups.Add(1)
		<-f.release
		return floodgate.Plan{}, errors.New("database slow")
	}
	return f.planBook.resolve(ctx, key)
}

// TestPlanKnownKeyKeepsItsPlanWhileRefreshFails: a customer whose plan's
// cache time has passed keeps deciding on the plan it has while the
// refresh fails, and while it hangs (only the decision that starts the
// refresh waits, up to LookupTimeout; the others do not wait at all). A
// failed refresh is tried again a second later, not on every request.
// MaxStale past its cache time, with still no answer, the plan is used
// no more. The refresh
// used to fail every decision (503) until the database answered.
func TestPlanKnownKeyKeepsItsPlanWhileRefreshFails(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	res := &flakyResolver{planBook: newPlanBook(map[string]floodgate.Plan{"ann": proPlan}), release: make(chan struct{})}
	defer close(res.release)
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: res.resolve,
		New: floodgate.SlidingLogPlans(floodgate.WithClock(clock.Now)), CacheTTL: time.Minute, MaxStale: 10 * time.Minute,
		LookupTimeout: 20 * time.Millisecond, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := func(what string, remaining int) {
		t.Helper()
		r := within(t, what, func() decided { d, err := plans.Allow(ctx, "ann"); return decided{d, err} })
		if r.err != nil || !r.d.Allowed || r.d.Limit != proPlan.Rate.Limit || r.d.Remaining != remaining {
			t.Fatalf("%s: %+v, %v; want allowed on pro, %d left", what, r.d, r.err, remaining)
		}
	}
	want("found", 11)
	clock.Advance(time.Minute) // the first request has aged out of pro's minute
	res.mode.Store(1)
	want("refresh failed", 11)
	want("right after", 10)
	if n := res.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2: a failed refresh is not tried on every request", n)
	}
	clock.Advance(time.Second)
	res.mode.Store(2)
	want("refresh hangs", 9) // waits for the lookup's deadline, then decides
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := plans.Allow(ctx, "ann"); err != nil || !d.Allowed {
				t.Errorf("concurrent decision %d while the refresh hangs: %+v, %v", i, d, err)
			}
		}()
	}
	wg.Wait()
	clock.Advance(10 * time.Minute)
	res.mode.Store(1)
	r := within(t, "past MaxStale", func() decided { d, err := plans.Allow(ctx, "ann"); return decided{d, err} })
	// The hanging refresh is still the key's lookup: out of time, it is
	// refused as a busy service.
	if r.err != nil || r.d.Allowed || !r.d.Overloaded {
		t.Fatalf("MaxStale past the cache time, the refresh hanging: %+v, %v; want an Overloaded denial", r.d, r.err)
	}
}

// TestPlanRefreshNotHeldUpBySpray: while made-up keys hold every lookup
// slot with lookups that hang, a customer's refresh still runs (it has
// slots of its own) and its upgrade reaches it; a customer whose refresh
// hangs too keeps its plan. The refresh used to be refused and the
// customer got 503 for as long as the spray lasted.
func TestPlanRefreshNotHeldUpBySpray(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	free := floodgate.Plan{Name: "free", Rate: floodgate.PerHour(3)}
	pro := floodgate.Plan{Name: "pro", Rate: floodgate.PerHour(12)}
	book := newPlanBook(map[string]floodgate.Plan{"ann": free})
	res := newHangingResolver(book, "ann")
	defer close(res.release)
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: res.resolve,
		New: floodgate.SlidingLogPlans(floodgate.WithClock(clock.Now)), CacheTTL: time.Minute,
		MaxLookups: 2, LookupTimeout: time.Hour, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := plans.Allow(ctx, "ann"); err != nil || d.Limit != free.Rate.Limit {
		t.Fatalf("ann on free: %+v, %v", d, err)
	}
	for i := range 2 {
		go func() { _, _ = plans.Allow(ctx, fmt.Sprintf("made-up-%d", i)) }()
	}
	until(t, "the spray in every lookup slot", func() bool { return res.hanging.Load() == 2 })
	book.set("ann", pro)
	clock.Advance(time.Minute)
	d, err := within(t, "ann's refresh", func() decided { d, err := plans.Allow(ctx, "ann"); return decided{d, err} }).unpack()
	if err != nil || !d.Allowed || d.Limit != pro.Rate.Limit || d.Remaining != pro.Rate.Limit-2 {
		t.Fatalf("ann, upgraded during the spray: %+v, %v; want pro, 1 used before and 1 now", d, err)
	}
}

func (r decided) unpack() (floodgate.Decision, error) { return r.d, r.err }

// TestPlanLookupTimeoutIsNotAnOutage: made-up API keys whose lookups run
// out of time (a database slow to find what is not there, or a resolver
// that ignores its context) are refused as a busy service under
// WithFailOpen, never let through as an outage: the deadline is the
// limiter's own. A resolver's own failure stays an outage for the error
// policy. Before, each timed-out key reached the handler under fail-open.
func TestPlanLookupTimeoutIsNotAnOutage(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("resolver honours its context %v", honours), func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
				Resolve: func(ctx context.Context, key string) (floodgate.Plan, error) {
					if key == "broken" {
						return floodgate.Plan{}, errors.New("database down")
					}
					if honours {
						select {
						case <-ctx.Done():
							return floodgate.Plan{}, ctx.Err()
						case <-release:
						}
					} else {
						<-release
					}
					return floodgate.Plan{}, floodgate.ErrNoPlan
				},
				New: floodgate.TokenBucketPlans(), LookupTimeout: 10 * time.Millisecond, MaxLookups: 16,
			})
			if err != nil {
				t.Fatal(err)
			}
			apiKey, err := floodgate.KeyByHeader("X-API-Key")
			if err != nil {
				t.Fatal(err)
			}
			limit, err := floodgate.NewMiddleware(plans, floodgate.WithKeyFunc(apiKey), floodgate.WithFailOpen())
			if err != nil {
				t.Fatal(err)
			}
			var served atomic.Int64
			h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
			codes := map[int]int{}
			for i := range 8 {
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("X-API-Key", fmt.Sprintf("made-up-%d", i))
				w := within(t, "a made-up key whose lookup times out", func() *httptest.ResponseRecorder {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w
				})
				codes[w.Code]++
				if w.Header().Get("Retry-After") == "" {
					t.Errorf("made-up key %d: no Retry-After", i)
				}
			}
			if n := served.Load(); n != 0 || codes[http.StatusServiceUnavailable] != 8 {
				t.Fatalf("made-up keys whose lookups timed out: %d reached the handler, statuses %v; want none, eight 503", n, codes)
			}
			// The resolver's own failure is an outage, which fail-open
			// is there to forgive.
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-API-Key", "broken")
			h.ServeHTTP(httptest.NewRecorder(), r)
			if n := served.Load(); n != 1 {
				t.Fatalf("a key whose lookup failed under fail-open: %d served, want 1", n)
			}
		})
	}
}
