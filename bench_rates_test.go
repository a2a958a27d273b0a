package floodgate

import (
	"context"
	"math/rand"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPlanLimiter: decisions through a PlanLimiter whose cache holds
// every key's plan (the cached lookup: one shard lock and map lookup more
// than the plan's own limiter), over 100k keys on four plans, beside the
// same token bucket asked directly (Direct), in one run.
//
//	go test -run '^$' -bench PlanLimiter .
func BenchmarkPlanLimiter(b *testing.B) {
	keys := makeKeys(benchKeys)
	plans := []Plan{{Name: "a", Rate: PerMinute(1 << 20)}, {Name: "b", Rate: PerMinute(1 << 21)},
		{Name: "c", Rate: PerMinute(1 << 22)}, {Name: "d", Rate: PerMinute(1 << 23)}}
	planOf := make(map[string]Plan, len(keys))
	for i, k := range keys {
		planOf[k] = plans[i%len(plans)]
	}
	pl, err := NewPlanLimiter(PlanConfig{
		Resolve:  func(_ context.Context, key string) (Plan, error) { return planOf[key], nil },
		New:      TokenBucketPlans(),
		CacheTTL: time.Hour, CacheSize: 2 * benchKeys,
		LookupTimeout: time.Minute, // a lookup's goroutine may wait long for a core on a loaded machine
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys {
		if d, err := pl.Allow(ctx, k); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
	order := rand.New(rand.NewSource(1)).Perm(len(keys))
	run := func(b *testing.B, l Limiter) {
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, _ = l.AllowN(ctx, keys[order[i%len(order)]], 1)
		}
	}
	b.Run("Cached", func(b *testing.B) { run(b, pl) })
	b.Run("Direct", func(b *testing.B) { run(b, populated(b, keys)) })
}

// BenchmarkDecisionsUnderSetRate: parallel decisions on 100k keys while
// one goroutine changes the rate back and forth without pause (each
// change converts every key, shard by shard), beside the same decisions
// with no change (Still). decisions/s is what the deciding goroutines got
// through; changes/op how many changes ran meanwhile.
//
//	go test -run '^$' -bench DecisionsUnderSetRate .
func BenchmarkDecisionsUnderSetRate(b *testing.B) {
	for _, changing := range []bool{false, true} {
		name := "Still"
		if changing {
			name = "Changing"
		}
		b.Run(name, func(b *testing.B) {
			keys := makeKeys(benchKeys)
			tb := populated(b, keys)
			ctx := context.Background()
			stop := make(chan struct{})
			done := make(chan struct{})
			var changes atomic.Int64
			rates := [2]Rate{PerMinute(1_000_000), PerMinute(2_000_000)}
			go func() {
				defer close(done)
				for i := 0; changing; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_ = tb.SetRate(ctx, RateChange{Rate: rates[i%2]})
					changes.Add(1)
				}
			}()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					_, _ = tb.Allow(ctx, keys[i%int64(len(keys))])
				}
			})
			b.StopTimer()
			close(stop)
			<-done
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(changes.Load())/float64(b.N), "changes/op")
		})
	}
}

// BenchmarkPlanCacheBytes reports what a PlanLimiter's cache holds per
// key (B/key): the key's record, its place in its stripe's LRU and map,
// and the key's copy, for 100k keys of 8 bytes on one plan, after a
// garbage collection. Each iteration fills a new limiter.
//
//	go test -run '^$' -bench PlanCacheBytes -benchtime 3x .
func BenchmarkPlanCacheBytes(b *testing.B) {
	keys := makeKeys(benchKeys)
	ctx := context.Background()
	var perKey float64
	for i := 0; i < b.N; i++ {
		pl, err := NewPlanLimiter(PlanConfig{
			Resolve:  func(context.Context, string) (Plan, error) { return Plan{Name: "a", Rate: PerMinute(100)}, nil },
			New:      TokenBucketPlans(),
			CacheTTL: time.Hour, CacheSize: 2 * benchKeys, LookupTimeout: time.Minute,
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pl.PlanOf(ctx, "warm"); err != nil { // the plan's limiter, built once
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, k := range keys {
			if _, err := pl.PlanOf(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(len(keys))
		runtime.KeepAlive(pl)
	}
	b.ReportMetric(perKey, "B/key")
}

// BenchmarkPlanLookup: the first decision of each key, which looks its
// plan up (a resolver that answers at once, on the goroutine a lookup
// runs on) and caches it.
//
//	go test -run '^$' -bench PlanLookup -benchtime 200000x .
func BenchmarkPlanLookup(b *testing.B) {
	pl, err := NewPlanLimiter(PlanConfig{
		Resolve:  func(context.Context, string) (Plan, error) { return Plan{Name: "a", Rate: PerMinute(100)}, nil },
		New:      TokenBucketPlans(),
		CacheTTL: time.Hour, CacheSize: max(b.N, 1), LookupTimeout: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	keys := makeKeys(b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d, err := pl.Allow(ctx, keys[i]); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
