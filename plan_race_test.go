package floodgate_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// racePlans returns a PlanLimiter over book whose cache looks each key
// up again after a nanosecond of clock, so that every tick of clock is a
// plan change for decisions in flight.
func racePlans(t *testing.T, book *planBook, clock *floodgatetest.Clock, kind string, how floodgate.Inherit) *floodgate.PlanLimiter {
	t.Helper()
	plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: book.resolve,
		New: planKinds[kind](floodgate.WithClock(clock.Now)), CacheTTL: time.Nanosecond, LookupTimeout: patientLookups, Inherit: how, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return plans
}

// TestPlanFlipUnderConcurrentDecisions: four goroutines decide one key
// while its plan flips between free (3 a minute) and pro (12) as fast as
// a fifth can flip it, each flip a new lookup. Within the microseconds
// of injected time the run takes nothing refills, so under KeepUsed and
// ScaleUsed alike no more than pro's 12 may be allowed, whatever the
// interleaving. A decision that held the key's old cache entry used to
// decide on the old plan's limiter after another had moved the key's
// state out of it, from a fresh quota: 13 to 97 were allowed.
func TestPlanFlipUnderConcurrentDecisions(t *testing.T) {
	for _, how := range []floodgate.Inherit{floodgate.KeepUsed, floodgate.ScaleUsed} {
		for kind := range planKinds {
			t.Run(fmt.Sprintf("%s/%v", kind, how), func(t *testing.T) {
				for trial := range 30 {
					clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
					book := newPlanBook(map[string]floodgate.Plan{"eve": freePlan})
					plans := racePlans(t, book, clock, kind, how)
					var allowed atomic.Int64
					stop := make(chan struct{})
					flipped := make(chan struct{})
					go func() {
						defer close(flipped)
						for i := 0; i < 100_000; i++ {
							select {
							case <-stop:
								return
							default:
							}
							book.set("eve", []floodgate.Plan{proPlan, freePlan}[i%2])
							clock.Advance(time.Nanosecond)
						}
					}()
					var wg sync.WaitGroup
					for range 4 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range 100 {
								if d, _ := plans.Allow(context.Background(), "eve"); d.Allowed {
									allowed.Add(1)
								}
							}
						}()
					}
					wg.Wait()
					close(stop)
					<-flipped
					if n := allowed.Load(); n > int64(proPlan.Rate.Limit) {
						t.Fatalf("trial %d: %d allowed while the plan flipped, above pro's %d", trial, n, proPlan.Rate.Limit)
					}
				}
			})
		}
	}
}

// TestPlanUpgradeDuringConcurrentDecisions: four goroutines decide a
// free key (3 a minute) while it is upgraded to pro (12) once, midway. What
// it spent on free stays spent, so no more than 12 may be allowed in all;
// a decision still holding the free entry used to decide on a free
// limiter emptied by the move, and 13 got through.
func TestPlanUpgradeDuringConcurrentDecisions(t *testing.T) {
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			for trial := range 50 {
				clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
				book := newPlanBook(map[string]floodgate.Plan{"ann": freePlan})
				plans := racePlans(t, book, clock, kind, floodgate.KeepUsed)
				var allowed, decided atomic.Int64
				var wg sync.WaitGroup
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 8 {
							if d, _ := plans.Allow(context.Background(), "ann"); d.Allowed {
								allowed.Add(1)
							}
							decided.Add(1)
						}
					}()
				}
				for decided.Load() < 4 {
					runtime.Gosched()
				}
				book.set("ann", proPlan)
				clock.Advance(time.Nanosecond)
				wg.Wait()
				if n := allowed.Load(); n > int64(proPlan.Rate.Limit) {
					t.Fatalf("trial %d: %d allowed across one upgrade, above pro's %d", trial, n, proPlan.Rate.Limit)
				}
			}
		})
	}
}

// TestPlanFlipAcrossSpellings: as TestPlanFlipUnderConcurrentDecisions,
// with each goroutine sending its own spelling of the key, which the
// resolver folds to one identity (Plan.Key): the spellings' cache records
// change plans apart, and the identity's state follows every decision
// under the identity's lock.
func TestPlanFlipAcrossSpellings(t *testing.T) {
	for kind := range planKinds {
		t.Run(kind, func(t *testing.T) {
			for trial := range 30 {
				clock := floodgatetest.NewClock(time.Unix(1_800_000_000, 0))
				var pro atomic.Bool
				resolve := func(_ context.Context, key string) (floodgate.Plan, error) {
					p := freePlan
					if pro.Load() {
						p = proPlan
					}
					p.Key = "key-acme"
					return p, nil
				}
				plans, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{Resolve: resolve,
					New: planKinds[kind](floodgate.WithClock(clock.Now)), CacheTTL: time.Nanosecond, LookupTimeout: patientLookups, Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				var allowed atomic.Int64
				stop, flipped := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(flipped)
					for i := 0; i < 100_000; i++ {
						select {
						case <-stop:
							return
						default:
						}
						pro.Store(i%2 == 0)
						clock.Advance(time.Nanosecond)
					}
				}()
				var wg sync.WaitGroup
				for _, key := range spellings("key-acme", 4) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 100 {
							if d, _ := plans.Allow(context.Background(), key); d.Allowed {
								allowed.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(stop)
				<-flipped
				if n := allowed.Load(); n > int64(proPlan.Rate.Limit) {
					t.Fatalf("trial %d: %d allowed across four spellings while the plan flipped, above pro's %d", trial, n, proPlan.Rate.Limit)
				}
			}
		})
	}
}
