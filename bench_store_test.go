package floodgate

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDefaultStoreBytesPerKey reports the heap a store of the
// default size (DefaultMaxKeys, 64 shards) retains per tracked key, from
// 1,000 keys to DefaultMaxKeys by steps of a quarter (issue 33: at most
// 50 B at every size, not only where the tables happen to be full): a
// token bucket, each key ("client-N") allowed once, measured after a GC
// before and after populating. Keys are hashed, so their length does not
// count. The worst of the sizes is reported as worst-B/key.
//
//	go test -run '^$' -bench DefaultStoreBytesPerKey -benchtime 1x .
func BenchmarkDefaultStoreBytesPerKey(b *testing.B) {
	var sizes []int
	for n := 1000.0; n < DefaultMaxKeys; n *= 1.25 {
		sizes = append(sizes, int(n))
	}
	sizes = append(sizes, DefaultMaxKeys)
	names := make([]string, DefaultMaxKeys)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	defaultStoreBytes(b, names[:sizes[0]]) // the first store of a process pays for more than itself
	worst := 0.0
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			var total float64
			for i := 0; i < b.N; i++ {
				total += defaultStoreBytes(b, names[:n])
			}
			b.ReportMetric(total/float64(b.N), "B/key")
			worst = math.Max(worst, total/float64(b.N))
		})
	}
	b.Run("worst", func(b *testing.B) { b.ReportMetric(worst, "worst-B/key") })
}

// BenchmarkDefaultStoreFewKeys reports the heap a store of the default
// size retains per tracked key when it tracks few: 10, 100, 1,000 and
// 2,441 keys and 10,000 (issue 33: what a service with a thousand
// clients pays, where the shards' fixed cost weighs most), measured as
// BenchmarkDefaultStoreBytesPerKey measures. B is the whole store's
// heap, for the sizes where a figure per key says little.
//
//	go test -run '^$' -bench DefaultStoreFewKeys -benchtime 20x .
func BenchmarkDefaultStoreFewKeys(b *testing.B) {
	names := make([]string, 10_000)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	defaultStoreBytes(b, names[:10]) // the first store of a process pays for more than itself
	for _, n := range []int{10, 100, 1000, 2441, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			var total float64
			for i := 0; i < b.N; i++ {
				total += defaultStoreBytes(b, names[:n])
			}
			b.ReportMetric(total/float64(b.N), "B/key")
			b.ReportMetric(total/float64(b.N)*float64(n), "B")
		})
	}
}

// BenchmarkTokenBucketChurnParallel: decisions on the tracked keys of a
// default store, in parallel, while keys come and go: every 16th call
// of each goroutine is a new key, inserted and then reset, so that the
// shards' mutexes and counts are written all along while the other
// decisions read their shards' tables. The shards are not padded apart
// (see shard): this is where a line shared by what a decision reads and
// what an insertion writes would show. At 1,000 and 100,000 tracked
// keys.
//
//	go test -run '^$' -bench TokenBucketChurnParallel .
func BenchmarkTokenBucketChurnParallel(b *testing.B) {
	for _, n := range []int{1000, benchKeys} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys := makeKeys(n)
			tb := populated(b, keys)
			ctx := context.Background()
			var seed atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := seed.Add(1)
				i := int(g) * 7919
				fresh := make([]string, 1024) // made before, not in the timed loop
				for j := range fresh {
					fresh[j] = "churn-" + strconv.FormatInt(g, 10) + "-" + strconv.Itoa(j)
				}
				for pb.Next() {
					if i%16 == 0 {
						k := fresh[i/16&1023]
						_, _ = tb.Allow(ctx, k)
						_ = tb.Reset(ctx, k)
					} else {
						_, _ = tb.Allow(ctx, keys[i%n])
					}
					i++
				}
			})
		})
	}
}

// defaultStoreBytes returns the heap per key that a default-sized token
// bucket retains once asked for each of names.
func defaultStoreBytes(b *testing.B, names []string) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, err := NewTokenBucket(Rate{Limit: 100, Period: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range names {
		if d, err := l.Allow(ctx, name); err != nil || !d.Allowed {
			b.Fatalf("%s: %+v, %v", name, d, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if st := l.Stats(); st.Keys != len(names) {
		b.Fatalf("holds %d keys of %d", st.Keys, len(names))
	}
	runtime.KeepAlive(l)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(names))
}

// BenchmarkGrowthStall reports how long a decision on a tracked key
// waits while its shard's table grows: one goroutine inserts keys into a
// one-shard store of 2^18 keys (its table grows from two buckets to its
// final size), while another decides on 64 keys already tracked and
// times each decision. Each fill's longest decision is kept; reported
// is their median, as a fill's longest may be a preemption on a busy
// machine (max-stall-µs: the longest of all). A decision waits for one
// bucket's keys to move at most (see shard.grow). Also reported: the
// time to fill, a key.
//
//	go test -run '^$' -bench GrowthStall -benchtime 9x .
func BenchmarkGrowthStall(b *testing.B) {
	const n = 1 << 18
	names := make([]string, n)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	var stalls, fills []float64
	var slow atomic.Int64 // decisions longer than 200 µs
	for i := 0; i < b.N; i++ {
		l, err := NewTokenBucket(Rate{Limit: 1 << 20, Period: time.Hour}, WithMaxKeys(n), WithShards(1))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for _, name := range names[:64] {
			_, _ = l.Allow(ctx, name)
		}
		var stop atomic.Bool
		worst := make(chan time.Duration)
		go func() {
			var w time.Duration
			for j := 0; !stop.Load(); j++ {
				t0 := time.Now()
				_, _ = l.Allow(ctx, names[j%64])
				d := time.Since(t0)
				w = max(w, d)
				if d > 200*time.Microsecond {
					slow.Add(1)
				}
			}
			worst <- w
		}()
		t0 := time.Now()
		for _, name := range names[64:] {
			_, _ = l.Allow(ctx, name)
		}
		fills = append(fills, float64(time.Since(t0).Nanoseconds())/n)
		stop.Store(true)
		stalls = append(stalls, float64((<-worst).Microseconds()))
	}
	slices.Sort(stalls)
	slices.Sort(fills)
	b.ReportMetric(stalls[len(stalls)/2], "median-stall-µs")
	b.ReportMetric(stalls[len(stalls)-1], "max-stall-µs")
	b.ReportMetric(fills[len(fills)/2], "fill-ns/key")
	b.ReportMetric(float64(slow.Load())/float64(b.N), "over-200µs/fill")
}
