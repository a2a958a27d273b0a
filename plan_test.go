package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// planBook is a resolver's database: the plan of each key, changeable,
// counting the lookups.
type planBook struct {
	mu      sync.Mutex
	plans   map[string]floodgate.Plan
	lookups atomic.Int64
}

func newPlanBook(plans map[string]floodgate.Plan) *planBook { return &planBook{plans: plans} }

func (b *planBook) set(key string, p floodgate.Plan) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.plans[key] = p
}

func (b *planBook) resolve(_ context.Context, key string) (floodgate.Plan, error) {
	b.lookups.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.plans[key]
	if !ok {
		return floodgate.Plan{}, floodgate.ErrNoPlan
	}
	return p, nil
}

// patientLookups is the LookupTimeout of tests that are not about it:
// under -race on a machine shared by many builds, a resolver's goroutine
// can be kept from a core for longer than the default 100 ms between its
// call and its return (1 lookup in about 300,000 here), which the
// deadline rightly fails. TestPlanLookupDeadlineHoldsWhateverTheResolver
// and its neighbours test the deadline itself.
const patientLookups = time.Minute

var (
	freePlan = floodgate.Plan{Name: "free", Rate: floodgate.PerMinute(3)}
	proPlan  = floodgate.Plan{Name: "pro", Rate: floodgate.PerMinute(12)}
)

// planKinds are the in-memory factories a PlanLimiter takes.
var planKinds = map[string]func(opts ...floodgate.Option) func(floodgate.Plan) (floodgate.Limiter, error){
	"TokenBucket":    floodgate.TokenBucketPlans,
	"SlidingLog":     floodgate.SlidingLogPlans,
	"SlidingCounter": floodgate.SlidingCounterPlans,
}

func newPlans(t *testing.T, book *planBook, clock *floodgatetest.Clock, how floodgate.Inherit, kind string, opts ...floodgate.Option) *floodgate.PlanLimiter {
	t.Helper()
	p, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
		Resolve:       book.resolve,
		New:           planKinds[kind](append([]floodgate.Option{floodgate.WithClock(clock.Now)}, opts...)...),
		CacheTTL:      time.Second,
		LookupTimeout: patientLookups,
		Inherit:       how,
		Clock:         clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanUpgradeWhileLimited: a free customer who spent its 3 a minute
// is limited; its plan becomes pro (12 a minute) in the database, and
// within the cache's time its decisions are pro's, with what it spent
// still spent (KeepUsed): 12 − 3 left, not 12 and not 0. Back to free, it
// is limited again: a downgrade never frees anyone.
func TestPlanUpgradeWhileLimited(t *testing.T) {
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
			book := newPlanBook(map[string]floodgate.Plan{"ann": freePlan})
			plans := newPlans(t, book, clock, floodgate.KeepUsed, kind)
			ctx := context.Background()
			for i := range 3 {
				if d, err := plans.Allow(ctx, "ann"); err != nil || !d.Allowed || d.Limit != 3 {
					t.Fatalf("free request %d: %+v, %v", i, d, err)
				}
			}
			if d, _ := plans.Allow(ctx, "ann"); d.Allowed {
				t.Fatalf("a fourth free request: %+v, want denied", d)
			}
			book.set("ann", proPlan)
			if d, _ := plans.Allow(ctx, "ann"); d.Allowed || d.Limit != 3 {
				t.Fatalf("before the cache looks again: %+v, want the free plan's denial", d)
			}
			clock.Advance(time.Second) // the cache's time: the plan is looked up again
			d, err := plans.AllowN(ctx, "ann", 0)
			if err != nil || d.Limit != 12 || d.Remaining != 9 {
				t.Fatalf("upgraded: %+v, %v; want Limit 12, Remaining 9", d, err)
			}
			for range 9 {
				if d, _ := plans.Allow(ctx, "ann"); !d.Allowed {
					t.Fatalf("upgraded, within the 9 left: %+v", d)
				}
			}
			book.set("ann", freePlan)
			clock.Advance(time.Second)
			if d, _ := plans.Allow(ctx, "ann"); d.Allowed || d.Limit != 3 {
				t.Fatalf("downgraded after spending 12: %+v, want the free plan's denial", d)
			}
		})
	}
}

// TestPlanScaleUsed: under ScaleUsed a customer who spent a third of its
// free quota has spent a third of pro's.
func TestPlanScaleUsed(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	book := newPlanBook(map[string]floodgate.Plan{"ann": freePlan})
	plans := newPlans(t, book, clock, floodgate.ScaleUsed, "SlidingLog")
	ctx := context.Background()
	_, _ = plans.Allow(ctx, "ann")
	book.set("ann", proPlan)
	clock.Advance(time.Second)
	if d, err := plans.AllowN(ctx, "ann", 0); err != nil || d.Remaining != 8 {
		t.Fatalf("1 of 3 spent, then pro under ScaleUsed: %+v, %v; want Remaining 8 (4 of 12 spent)", d, err)
	}
}

// TestPlanRefusesForgivingStrategies: a plan change under AddDifference
// or StartFresh would let a client who can switch its own plan buy its
// quota back; both are refused at construction.
func TestPlanRefusesForgivingStrategies(t *testing.T) {
	for _, how := range []floodgate.Inherit{floodgate.AddDifference, floodgate.StartFresh, floodgate.Inherit(9)} {
		_, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: newPlanBook(nil).resolve,
			New: floodgate.TokenBucketPlans(), Inherit: how})
		if !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("Inherit %v: %v, want ErrInvalidOption", how, err)
		}
	}
	for _, c := range []floodgate.PlanConfig{{New: floodgate.TokenBucketPlans()}, {Resolve: newPlanBook(nil).resolve}} {
		if _, err := floodgate.NewPlanLimiter(c); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%+v: %v, want ErrInvalidOption", c, err)
		}
	}
}

// TestPlanSwitchingBackAndForth: a client that can change its own plan
// gains nothing by switching back and forth: under KeepUsed each switch
// keeps what it spent, so over any number of switches it is allowed no
// more than the larger plan's quota at one instant.
func TestPlanSwitchingBackAndForth(t *testing.T) {
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
			book := newPlanBook(map[string]floodgate.Plan{"eve": freePlan})
			plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: book.resolve,
				New: planKinds[kind](floodgate.WithClock(clock.Now)), CacheTTL: time.Nanosecond, LookupTimeout: patientLookups, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			allowed := 0
			for i := range 200 {
				book.set("eve", []floodgate.Plan{freePlan, proPlan}[i%2])
				clock.Advance(time.Nanosecond) // a new lookup each time
				if d, _ := plans.Allow(context.Background(), "eve"); d.Allowed {
					allowed++
				}
			}
			if allowed > proPlan.Rate.Limit {
				t.Fatalf("%d allowed within 200 ns while switching plans, above pro's %d", allowed, proPlan.Rate.Limit)
			}
		})
	}
}

// TestPlanEvictedKeyKeepsItsDebt: a key evicted from its plan's store
// while limited, whose plan changes meanwhile, comes back under its new
// plan owing what it spent, converted: the debt memory's units follow it.
func TestPlanEvictedKeyKeepsItsDebt(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	book := newPlanBook(map[string]floodgate.Plan{"ann": proPlan})
	plans := newPlans(t, book, clock, floodgate.KeepUsed, "TokenBucket", floodgate.WithMaxKeys(4), floodgate.WithShards(1))
	ctx := context.Background()
	if d, _ := plans.AllowN(ctx, "ann", 12); !d.Allowed {
		t.Fatalf("pro spends 12: %+v", d)
	}
	for i := range 20 {
		key := fmt.Sprintf("spray-%d", i)
		book.set(key, proPlan)
		_, _ = plans.AllowN(ctx, key, 12)
	}
	book.set("ann", freePlan)
	clock.Advance(time.Second)
	d, err := plans.AllowN(ctx, "ann", 0)
	// 12 spent, a second refilled at pro's 12/min: 11.8 used, at free's
	// 3/min, 3m56s until full.
	if err != nil || d.Limit != 3 || d.Remaining != 0 || d.ResetAfter != 3*time.Minute+56*time.Second {
		t.Fatalf("evicted, then downgraded: %+v, %v; want Limit 3, Remaining 0, ResetAfter 3m56s", d, err)
	}
}

// TestPlanLookupsCached: a key's plan is looked up once per CacheTTL,
// and concurrent decisions for a key not cached share one lookup.
func TestPlanLookupsCached(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	release := make(chan struct{})
	var lookups atomic.Int64
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
		Resolve: func(ctx context.Context, key string) (floodgate.Plan, error) {
			lookups.Add(1)
			<-release
			return proPlan, nil
		},
		New: floodgate.TokenBucketPlans(floodgate.WithClock(clock.Now)), CacheTTL: time.Minute, Clock: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := plans.Allow(context.Background(), "k"); err != nil || !d.Allowed {
				t.Errorf("%+v, %v", d, err)
			}
		}()
	}
	for lookups.Load() == 0 {
		time.Sleep(time.Millisecond) // until the first decision is in the resolver: no refill waited for
	}
	time.Sleep(10 * time.Millisecond) // let the others reach the lookup in flight
	close(release)
	wg.Wait()
	for range 100 {
		_, _ = plans.Allow(context.Background(), "k")
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d lookups for 108 decisions of one key within the cache's time, want 1", n)
	}
	clock.Advance(time.Minute)
	_, _ = plans.Allow(context.Background(), "k")
	if n := lookups.Load(); n != 2 {
		t.Fatalf("%d lookups after the cache's time, want 2", n)
	}
}

// TestPlanUnknownKeysDoNotEvictCustomers: a spray of made-up keys, each
// unknown to the resolver, costs one lookup each and never pushes a
// customer's plan out of the cache: the customer is not looked up again.
func TestPlanUnknownKeysDoNotEvictCustomers(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	book := newPlanBook(map[string]floodgate.Plan{"ann": proPlan})
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: book.resolve,
		New: floodgate.TokenBucketPlans(floodgate.WithClock(clock.Now)), CacheSize: 64, LookupTimeout: patientLookups, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = plans.Allow(ctx, "ann")
	for i := range 10_000 {
		if _, err := plans.Allow(ctx, fmt.Sprintf("made-up-%d", i)); !errors.Is(err, floodgate.ErrNoPlan) {
			t.Fatalf("made-up key %d: %v, want ErrNoPlan", i, err)
		}
	}
	before := book.lookups.Load()
	if d, err := plans.Allow(ctx, "ann"); err != nil || !d.Allowed {
		t.Fatalf("the customer after the spray: %+v, %v", d, err)
	}
	if book.lookups.Load() != before {
		t.Fatalf("the customer was looked up again after a spray of unknown keys")
	}
	if before != 10_001 {
		t.Fatalf("%d lookups for 1 customer and 10,000 made-up keys, want 10,001", before)
	}
}

// TestPlanLookupFailuresFailClosed: a resolver that fails fails the
// decision with ErrPlanLookup, one that does not answer within
// LookupTimeout gets it refused as Overloaded, and neither allows; it is never answered from a default
// plan. More lookups than MaxLookups at once fail at once. Behind the
// middleware, the default error policy answers 503.
func TestPlanLookupFailuresFailClosed(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
		Resolve: func(ctx context.Context, key string) (floodgate.Plan, error) {
			switch key {
			case "broken":
				return floodgate.Plan{}, errors.New("database down")
			case "bad-plan":
				return floodgate.Plan{Name: "bad"}, nil // no rate
			}
			select {
			case <-ctx.Done(): // slow: the deadline ends it
				return floodgate.Plan{}, ctx.Err()
			case <-block:
				return proPlan, nil
			}
		},
		New: floodgate.TokenBucketPlans(), LookupTimeout: 20 * time.Millisecond, MaxLookups: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"broken", "bad-plan", "slow"} {
		start := time.Now()
		d, err := plans.Allow(ctx, key)
		if key == "slow" {
			// Out of time: refused as a busy service, not failed.
			if err != nil || d.Allowed || !d.Overloaded {
				t.Errorf("%s: %+v, %v; want an Overloaded denial", key, d, err)
			}
		} else if !errors.Is(err, floodgate.ErrPlanLookup) || d.Allowed {
			t.Errorf("%s: %+v, %v; want ErrPlanLookup and no allowance", key, d, err)
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("%s: took %v, want about the 20 ms lookup timeout", key, time.Since(start))
		}
	}
	limit, err := floodgate.NewMiddleware(plans, floodgate.WithKeyFunc(func(r *http.Request) (string, error) { return "broken", nil }))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler ran") })).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("behind the middleware: status %d, want 503", w.Code)
	}
}

// TestPlanKnownKey: in a PolicySelector, an API key the resolver does not
// know falls through to the next policy (by client IP), so made-up keys
// get no quota of their own; a known one is limited at its plan.
func TestPlanKnownKey(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	book := newPlanBook(map[string]floodgate.Plan{"key-ann": freePlan})
	plans := newPlans(t, book, clock, floodgate.KeepUsed, "TokenBucket")
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		t.Fatal(err)
	}
	anon, err := floodgate.NewTokenBucket(floodgate.PerMinute(2), floodgate.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := floodgate.NewPolicySelector(
		floodgate.Policy{Name: "customer", Limiter: plans, Key: plans.KnownKey(apiKey)},
		floodgate.Policy{Name: "anonymous", Limiter: anon, Key: clientIP},
	)
	if err != nil {
		t.Fatal(err)
	}
	limit, err := floodgate.NewPolicyMiddleware(sel)
	if err != nil {
		t.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func(key string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "198.51.100.4:1"
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return fmt.Sprintf("%d %s", w.Code, w.Header().Get("RateLimit-Policy"))
	}
	for i, want := range []string{`200 "anonymous";q=2;w=60`, `200 "anonymous";q=2;w=60`, `429 "anonymous";q=2;w=60`} {
		if got := call(fmt.Sprintf("made-up-%d", i)); got != want {
			t.Errorf("made-up key %d: %s, want %s", i, got, want)
		}
	}
	if got := call("key-ann"); got != `200 "customer";q=3;w=60` {
		t.Errorf("a customer: %s", got)
	}
}

// fixedLimiter is a limiter that keeps its state in place, as a Redis
// limiter does (it cannot move a key's state to another plan's limiter).
type fixedLimiter struct{ rate floodgate.Rate }

func (l fixedLimiter) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: l.rate.Limit}, nil
}

// TestPlanInPlaceOnePeriod: limiters that keep a key's state in place (on
// Redis) read it under the new plan as it stands, which is sound only for
// plans of one period: a sliding counter's windows of another length
// would find the key's window long gone and forgive it everything. A
// plan of another period fails its lookup, and so its decisions.
func TestPlanInPlaceOnePeriod(t *testing.T) {
	book := newPlanBook(map[string]floodgate.Plan{
		"ann": freePlan, "bob": proPlan,
		"eve": {Name: "hourly", Rate: floodgate.Rate{Limit: 100, Period: time.Hour}},
	})
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: book.resolve,
		New: func(p floodgate.Plan) (floodgate.Limiter, error) { return fixedLimiter{p.Rate}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"ann", "bob"} {
		if d, err := plans.Allow(ctx, key); err != nil || !d.Allowed {
			t.Fatalf("%s, a plan of the first plan's period: %+v, %v", key, d, err)
		}
	}
	if d, err := plans.Allow(ctx, "eve"); !errors.Is(err, floodgate.ErrPlanLookup) || d.Allowed {
		t.Fatalf("eve, a plan of another period: %+v, %v; want ErrPlanLookup and no allowance", d, err)
	}
}

// TestPlanUnknownKeyUnderFailOpen: an API key the resolver does not know
// is the client's own doing, not a failure of the limiter. Under
// WithFailOpen, made-up keys sent straight to a PlanLimiter (no KnownKey)
// got through, uncounted, every time (fail-open forgave ErrNoPlan as an
// outage); they get a 4xx, and a known key is still served.
func TestPlanUnknownKeyUnderFailOpen(t *testing.T) {
	clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
	plans := newPlans(t, newPlanBook(map[string]floodgate.Plan{"key-ann": freePlan}), clock, floodgate.KeepUsed, "TokenBucket")
	apiKey, err := floodgate.KeyByHeader("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := floodgate.NewMiddleware(plans, floodgate.WithKeyFunc(apiKey), floodgate.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	call := func(key string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 10 {
		if code := call(fmt.Sprintf("made-up-%d", i)); code < 400 || code >= 500 {
			t.Errorf("made-up key %d: status %d, want a 4xx", i, code)
		}
	}
	if served != 0 {
		t.Fatalf("the handler ran %d times for made-up keys under fail-open", served)
	}
	if code := call("key-ann"); code != http.StatusOK || served != 1 {
		t.Fatalf("a known key: status %d, served %d; want 200", code, served)
	}
}
