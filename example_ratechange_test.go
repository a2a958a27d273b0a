package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Changing a limit while serving: a client that spent its 3 per minute
// is limited; the limit is raised to 6 per minute, and under the default
// strategy, KeepUsed, what it spent stays spent, so it has exactly the 3
// the upgrade added. Cut back to 2 per minute, it is limited again: the 4
// it spent take 2 minutes to come back at the new rate, and one request
// fits once 3 have (1m30s). Every limiter of the package, and those of
// redisstore, take a new rate this way.
func ExampleTokenBucket_SetRate() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	lim, err := floodgate.NewTokenBucket(floodgate.PerMinute(3), floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	show := func(what string) {
		d, _ := lim.Allow(ctx, "alice")
		fmt.Printf("%-18s allowed=%-5v limit=%d remaining=%d retry=%v\n", what, d.Allowed, d.Limit, d.Remaining, d.RetryAfter)
	}
	for range 3 {
		_, _ = lim.Allow(ctx, "alice")
	}
	show("3 spent of 3/min")

	err = lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerMinute(6)}) // Inherit: KeepUsed
	if err != nil {
		panic(err)
	}
	show("raised to 6/min")

	err = lim.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	show("cut to 2/min")
	// Output:
	// 3 spent of 3/min   allowed=false limit=3 remaining=0 retry=20s
	// raised to 6/min    allowed=true  limit=6 remaining=2 retry=0s
	// cut to 2/min       allowed=false limit=2 remaining=0 retry=1m30s
}

// A rate per key, in business code: an export job is limited per
// customer at the rate of the customer's plan, which the resolver looks
// up (in the account database; here a map) and the PlanLimiter caches for
// a minute. A customer the resolver does not know gets ErrNoPlan, and a
// failed lookup ErrPlanLookup: neither is allowed.
func ExamplePlanLimiter() {
	plans := map[string]floodgate.Plan{
		"acme":   {Name: "free", Rate: floodgate.PerHour(2)},
		"globex": {Name: "business", Rate: floodgate.PerHour(100)},
	}
	exports, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
		Resolve: func(_ context.Context, customer string) (floodgate.Plan, error) {
			plan, ok := plans[customer]
			if !ok {
				return floodgate.Plan{}, floodgate.ErrNoPlan
			}
			return plan, nil
		},
		New: floodgate.TokenBucketPlans(),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, customer := range []string{"acme", "acme", "acme", "globex", "initech"} {
		d, err := exports.Allow(ctx, customer)
		switch {
		case errors.Is(err, floodgate.ErrNoPlan):
			fmt.Printf("%-8s no plan: refused\n", customer)
		case err != nil:
			fmt.Printf("%-8s lookup failed: refused\n", customer)
		default:
			fmt.Printf("%-8s allowed=%-5v limit=%d remaining=%d\n", customer, d.Allowed, d.Limit, d.Remaining)
		}
	}
	// Output:
	// acme     allowed=true  limit=2 remaining=1
	// acme     allowed=true  limit=2 remaining=0
	// acme     allowed=false limit=2 remaining=0
	// globex   allowed=true  limit=100 remaining=99
	// initech  no plan: refused
}
