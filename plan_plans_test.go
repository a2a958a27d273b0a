package floodgate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// customPlan is customer i's own plan: 2+i a minute.
func customPlan(i int) floodgate.Plan {
	return floodgate.Plan{Name: fmt.Sprintf("custom-%d", i), Rate: floodgate.PerMinute(2 + i)}
}

// TestPlanMaxPlansFreesDrainedPlans: customers with custom rates, one
// plan each, four limiters at most (MaxPlans). While four customers hold
// live limits a fifth plan waits, refused as a busy service (Overloaded,
// with the time until a limiter drains), and the four stay limited: a
// live limit is never dropped. Once a limiter is back to fresh states it
// makes room, and sixteen more custom plans get limiters in turn; a
// customer whose plan's limiter was dropped comes back on a new one. The
// 65th distinct plan used to fail every decision of its keys for the
// life of the process.
func TestPlanMaxPlansFreesDrainedPlans(t *testing.T) {
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
			book := newPlanBook(map[string]floodgate.Plan{})
			for i := range 20 {
				book.set(fmt.Sprintf("customer-%d", i), customPlan(i))
			}
			plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: book.resolve,
				New: planKinds[kind](floodgate.WithClock(clock.Now)), CacheTTL: time.Hour, MaxPlans: 4, LookupTimeout: patientLookups, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			spend := func(i int) {
				t.Helper()
				key, limit := fmt.Sprintf("customer-%d", i), customPlan(i).Rate.Limit
				for j := range limit {
					if d, err := plans.Allow(ctx, key); err != nil || !d.Allowed || d.Limit != limit {
						t.Fatalf("%s, request %d of its %d: %+v, %v", key, j+1, limit, d, err)
					}
				}
				if d, err := plans.Allow(ctx, key); err != nil || d.Allowed || d.Overloaded {
					t.Fatalf("%s past its %d: %+v, %v; want a denial of its own limit", key, limit, d, err)
				}
			}
			for i := range 4 {
				spend(i)
			}
			d, err := plans.Allow(ctx, "customer-4")
			if err != nil || d.Allowed || !d.Overloaded || d.RetryAfter <= 0 || d.RetryAfter > 3*time.Minute {
				t.Fatalf("a fifth plan while four hold live limits: %+v, %v; want Overloaded, with a wait of 3 minutes at most", d, err)
			}
			for i := range 4 {
				if d, err := plans.Allow(ctx, fmt.Sprintf("customer-%d", i)); err != nil || d.Allowed || d.Overloaded {
					t.Fatalf("customer-%d, limited, while a fifth plan waits: %+v, %v; want still limited", i, d, err)
				}
			}
			clock.Advance(d.RetryAfter)
			for i := 4; i < 20; i++ {
				spend(i)
				clock.Advance(3 * time.Minute)
			}
			spend(0)
		})
	}
}

// TestPlanRecordEvictedKeyKeepsItsState: a limited key whose cache
// record is pushed out by other customers, and whose plan changes
// meanwhile, is found in its old plan's limiter and comes back on the new
// plan owing what it spent.
func TestPlanRecordEvictedKeyKeepsItsState(t *testing.T) {
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
			book := newPlanBook(map[string]floodgate.Plan{"ann": proPlan})
			plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: book.resolve,
				New: planKinds[kind](floodgate.WithClock(clock.Now)), CacheSize: 8, CacheTTL: time.Hour, LookupTimeout: patientLookups, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if d, err := plans.AllowN(ctx, "ann", 12); err != nil || !d.Allowed {
				t.Fatalf("ann spends pro's 12: %+v, %v", d, err)
			}
			for i := range 64 {
				key := fmt.Sprintf("other-%d", i)
				book.set(key, freePlan)
				if _, err := plans.Allow(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			book.set("ann", freePlan)
			if d, err := plans.AllowN(ctx, "ann", 0); err != nil || d.Limit != 3 || d.Remaining != 0 {
				t.Fatalf("ann, its record gone and its plan now free: %+v, %v; want free's limit, nothing left", d, err)
			}
		})
	}
}
