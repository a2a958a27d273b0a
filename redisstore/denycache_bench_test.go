package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// BenchmarkDenyCacheHit measures the deny cache's hit path: a decision
// answered in process from a cached denial, one caller and all callers
// (GOMAXPROCS), over the populated key set of the other benchmarks
// (benchKeys keys, each denied once by Redis first). The clock is frozen
// and the rate record read once an hour, so that no entry ages out and
// every decision is a hit: hits/op must be 1, or the figure is not the
// hit path's.
func BenchmarkDenyCacheHit(b *testing.B) {
	addr := redistest.Shared(b)
	clock := &fakeClock{t0}
	l := algos[0].mustNew(b, goRedis(b, addr).s, floodgate.PerHour(1), redisstore.WithPrefix(prefix(b)),
		redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Hour), redisstore.WithTimeout(10*time.Second),
		redisstore.WithDenyCache(2*benchKeys)) // room to spare: the shards fill unevenly
	ctx := context.Background()
	for _, k := range benchKeyNames {
		for _, want := range []bool{true, false} {
			if d, err := l.AllowN(ctx, k, 1); err != nil || d.Allowed != want {
				b.Fatalf("populating %q: %+v, %v; want Allowed %v", k, d, err, want)
			}
		}
	}
	stats := l.(interface{ Stats() redisstore.Stats })
	run := func(b *testing.B, loop func(b *testing.B)) {
		before := stats.Stats().DenyCacheHits
		b.ReportAllocs()
		b.ResetTimer()
		loop(b)
		b.StopTimer()
		hits := stats.Stats().DenyCacheHits - before
		b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
		if hits != uint64(b.N) {
			b.Fatalf("%d hits in %d decisions: not the hit path", hits, b.N)
		}
	}
	b.Run("Serial", func(b *testing.B) {
		run(b, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if d, _ := l.AllowN(ctx, benchKeyNames[i%benchKeys], 1); d.Allowed {
					b.Fatal("allowed a cached denial")
				}
			}
		})
	})
	b.Run("Parallel", func(b *testing.B) {
		run(b, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					// Strided so that callers meet on the same shards.
					if d, _ := l.AllowN(ctx, benchKeyNames[i%benchKeys], 1); d.Allowed {
						b.Error("allowed a cached denial")
						return
					}
					i += 7
				}
			})
		})
	})
}
