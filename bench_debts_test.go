package floodgate

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkDebtEvictions times the debt memory's paths in a 16,384-key
// token-bucket store (one shard per 4,096 keys) whose every key is live:
// a spray of m × MaxKeys fresh keys, each taking the only token of its
// hour, so that each decision evicts a live key and writes its debt
// (spray-ns/key: up to 2 × the debts fit two words each, exactly; at 8 ×
// most are rounded up into one), then 100,000 fresh keys looked up with
// a report (fresh-ns/key), which reads the two buckets of each. Each
// round builds and fills a new store, untimed; the metrics are the
// round's wall time per key.
//
//	go test -run '^$' -bench DebtEvictions -benchtime 5x .
func BenchmarkDebtEvictions(b *testing.B) {
	const maxKeys, fresh = 1 << 14, 100_000
	for _, m := range []int{2, 8} {
		b.Run(fmt.Sprintf("spray=%dx", m), func(b *testing.B) {
			keys := makeKeys(maxKeys + m*maxKeys + fresh)
			ctx := context.Background()
			var spray, lookup time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				clk := newTBClock()
				tb, err := NewTokenBucket(PerHour(1), WithClock(clk.Now), WithMaxKeys(maxKeys))
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys[:maxKeys] {
					_, _ = tb.Allow(ctx, k)
				}
				b.StartTimer()
				start := time.Now()
				for _, k := range keys[maxKeys : maxKeys+m*maxKeys] {
					_, _ = tb.Allow(ctx, k)
				}
				mid := time.Now()
				for _, k := range keys[maxKeys+m*maxKeys:] {
					_, _ = tb.AllowN(ctx, k, 0)
				}
				spray += mid.Sub(start)
				lookup += time.Since(mid)
				if st := tb.Stats(); st.EvictedLive < uint64(m*maxKeys) {
					b.Fatalf("the spray evicted %d live keys, want %d", st.EvictedLive, m*maxKeys)
				}
			}
			b.ReportMetric(float64(spray)/float64(b.N*m*maxKeys), "spray-ns/key")
			b.ReportMetric(float64(lookup)/float64(b.N*fresh), "fresh-ns/key")
			b.ReportMetric(0, "ns/op")
		})
	}
}
