package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// spellings returns n spellings of key, differing in the case of its
// letters.
func spellings(key string, n int) []string {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		b, bit := []byte(key), 0
		for j := range b {
			if b[j] >= 'a' && b[j] <= 'z' {
				if i>>bit&1 == 1 {
					b[j] -= 'a' - 'A'
				}
				bit++
			}
		}
		out = append(out, string(b))
	}
	return out
}

// foldingResolver finds key-acme whatever the case, as a database whose
// collation folds case does, and says which identity it found (Plan.Key)
// if identify is set.
func foldingResolver(plan floodgate.Plan, identify bool) floodgate.PlanResolver {
	return func(_ context.Context, key string) (floodgate.Plan, error) {
		if !strings.EqualFold(key, "key-acme") {
			return floodgate.Plan{}, floodgate.ErrNoPlan
		}
		p := plan
		if identify {
			p.Key = "key-acme"
		}
		return p, nil
	}
}

// TestPlanKeyCountsEverySpellingAsOne: a resolver that folds case finds
// one customer under 64 spellings of its API key, each sending 5
// requests. With Plan.Key saying which identity it found, all 64 count
// under it: 5 of the 320 get through on a 5-an-hour plan, one after the
// other or all at once. Without it, each spelling had a quota of its
// own: all 320 got through.
func TestPlanKeyCountsEverySpellingAsOne(t *testing.T) {
	hourly := floodgate.Plan{Name: "hourly", Rate: floodgate.PerHour(5)}
	keys := spellings("key-acme", 64)
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			for _, concurrent := range []bool{false, true} {
				clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
				plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: foldingResolver(hourly, true),
					New: planKinds[kind](floodgate.WithClock(clock.Now)), LookupTimeout: patientLookups, Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				var allowed atomic.Int64
				var wg sync.WaitGroup
				for _, key := range keys {
					decide := func() {
						for range 5 {
							d, err := plans.Allow(context.Background(), key)
							if err != nil || d.Limit != 5 {
								t.Errorf("%s: %+v, %v", key, d, err)
							}
							if d.Allowed {
								allowed.Add(1)
							}
						}
					}
					if !concurrent {
						decide()
						continue
					}
					wg.Add(1)
					go func() { defer wg.Done(); decide() }()
				}
				wg.Wait()
				if n := allowed.Load(); n != 5 {
					t.Fatalf("concurrent %v: %d of 5 requests from each of 64 spellings allowed on a 5-an-hour plan, want 5", concurrent, n)
				}
			}
		})
	}
}

// TestPlanKeyUnknownSpellingsStayUnknown: Plan.Key changes nothing for
// keys the resolver does not know: they get ErrNoPlan, and count under
// nothing.
func TestPlanKeyUnknownSpellingsStayUnknown(t *testing.T) {
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
		Resolve: foldingResolver(floodgate.Plan{Name: "hourly", Rate: floodgate.PerHour(5)}, true),
		New:     floodgate.TokenBucketPlans(), LookupTimeout: patientLookups})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Allow(context.Background(), "key-acme2"); !errors.Is(err, floodgate.ErrNoPlan) {
		t.Fatalf("an unknown key: %v, want ErrNoPlan", err)
	}
	if d, err := plans.Allow(context.Background(), "KEY-ACME"); err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("a spelling of the known key: %+v, %v", d, err)
	}
}
