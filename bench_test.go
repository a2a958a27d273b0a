package floodgate

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchKeys is how many keys the populated benchmarks track.
const benchKeys = 100_000

// hotRates never run dry on the system clock during a benchmark: a huge
// burst and refill. One divides its period exactly (the 64-bit path), the
// other does not (the 128-bit path).
var hotRates = []struct {
	name string
	r    Rate
}{
	{"exact", Rate{Limit: 1 << 24, Period: time.Second >> 4}},
	{"fraction", Rate{Limit: 1<<24 - 1, Period: time.Second}},
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("198.51.%d.%d", i/256, i%256)
	}
	return keys
}

func reportAllowed(b *testing.B, allowed int64) {
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}

// BenchmarkBaselineXTimeRate is a single golang.org/x/time/rate Limiter
// on the system clock: the reference to quote ratios against on a shared
// machine.
func BenchmarkBaselineXTimeRate(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1<<28), 1<<24)
	b.ReportAllocs()
	var allowed int64
	for i := 0; i < b.N; i++ {
		if lim.Allow() {
			allowed++
		}
	}
	reportAllowed(b, allowed)
}

// BenchmarkTokenBucketHotKey: one key, allowed decisions, system clock.
func BenchmarkTokenBucketHotKey(b *testing.B) {
	for _, hr := range hotRates {
		b.Run(hr.name, func(b *testing.B) {
			tb, err := NewTokenBucket(hr.r)
			if err != nil {
				b.Fatal(err)
			}
			benchHotKey(b, tb)
		})
	}
}

// BenchmarkTimeNow is the system clock read that every decision (and the
// x/time/rate baseline) pays.
func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	start := time.Now()
	var sum time.Duration
	for i := 0; i < b.N; i++ {
		sum += time.Since(start)
	}
	if sum < 0 {
		b.Fatal("time went backwards")
	}
}

// BenchmarkTokenBucketHotKeyFrozenClock is the hot key without the system
// clock read: the cost of the decision itself (hash, lock, LRU, GCRA).
func BenchmarkTokenBucketHotKeyFrozenClock(b *testing.B) {
	now := time.Now()
	tb, err := NewTokenBucket(Rate{Limit: 1 << 24, Period: time.Hour}, WithClock(func() time.Time { return now }))
	if err != nil {
		b.Fatal(err)
	}
	// Allowed until the burst runs out, then denied: both paths cost the
	// same; the metric says which was measured.
	benchHotKey(b, tb)
}

// benchHotKey times Allow on one key and reports how many were allowed.
func benchHotKey(b *testing.B, tb *TokenBucket) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var allowed int64
	for i := 0; i < b.N; i++ {
		d, _ := tb.Allow(ctx, "203.0.113.7")
		if d.Allowed {
			allowed++
		}
	}
	reportAllowed(b, allowed)
}

// BenchmarkTokenBucketHotKeyParallel: every goroutine on the same key, so
// on one shard lock: the worst case for contention.
func BenchmarkTokenBucketHotKeyParallel(b *testing.B) {
	tb, err := NewTokenBucket(hotRates[0].r)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = tb.Allow(ctx, "203.0.113.7")
		}
	})
}

// populated returns a token bucket tracking every one of keys.
func populated(b *testing.B, keys []string, opts ...Option) *TokenBucket {
	b.Helper()
	tb := fill(b, keys, opts...)
	if got := tb.Stats().Keys; got != len(keys) {
		b.Fatalf("populated %d keys, store holds %d", len(keys), got)
	}
	return tb
}

// fill returns a token bucket that was asked once for each of keys.
func fill(b *testing.B, keys []string, opts ...Option) *TokenBucket {
	b.Helper()
	tb, err := NewTokenBucket(PerMinute(1_000_000), opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys {
		if _, err := tb.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	return tb
}

// BenchmarkTokenBucketPopulated: 100k tracked keys, requests spread over
// all of them (cache misses included), serial.
func BenchmarkTokenBucketPopulated(b *testing.B) {
	keys := makeKeys(benchKeys)
	tb := populated(b, keys)
	ctx := context.Background()
	order := rand.New(rand.NewSource(1)).Perm(len(keys))
	b.ReportAllocs()
	b.ResetTimer()
	var allowed int64
	for i := 0; i < b.N; i++ {
		d, _ := tb.Allow(ctx, keys[order[i%len(order)]])
		if d.Allowed {
			allowed++
		}
	}
	reportAllowed(b, allowed)
}

// BenchmarkTokenBucketPopulatedParallel: the same with b.RunParallel;
// goroutines start at different offsets of the key list.
func BenchmarkTokenBucketPopulatedParallel(b *testing.B) {
	keys := makeKeys(benchKeys)
	tb := populated(b, keys)
	ctx := context.Background()
	var seed atomic.Int64
	var allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(7919)) * 13
		var n int64
		for pb.Next() {
			d, _ := tb.Allow(ctx, keys[i%len(keys)])
			if d.Allowed {
				n++
			}
			i++
		}
		allowed.Add(n)
	})
	reportAllowed(b, allowed.Load())
}

// BenchmarkTokenBucketNewKeys: every request is a key the full store has
// never seen, so every one evicts (the key-spray case).
func BenchmarkTokenBucketNewKeys(b *testing.B) {
	keys := makeKeys(benchKeys)
	tb := fill(b, keys, WithMaxKeys(benchKeys), WithShards(64))
	// More fresh keys than the store holds: when the list wraps around,
	// its keys were evicted long ago, so every request inserts.
	fresh := make([]string, 4*benchKeys)
	for i := range fresh {
		fresh[i] = fmt.Sprintf("2001:db8::%x", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _ = tb.Allow(ctx, fresh[i%len(fresh)])
	}
	b.StopTimer()
	st := tb.Stats()
	b.ReportMetric(float64(st.EvictedLive)/float64(b.N), "live-evictions/op")
}

// BenchmarkTokenBucketBytesPerKey reports the heap retained per tracked
// key with 100k keys, measured after a GC before and after populating (the
// key strings are made beforehand: the store keeps only their hashes).
func BenchmarkTokenBucketBytesPerKey(b *testing.B) {
	for _, cfg := range []struct {
		name string
		opts []Option
	}{
		{"default", nil}, // DefaultMaxKeys, 64 shards
		{"maxkeys=128k", []Option{WithMaxKeys(1 << 17)}},
	} {
		b.Run(cfg.name, func(b *testing.B) {
			keys := makeKeys(benchKeys)
			b.ReportAllocs()
			var total float64
			for i := 0; i < b.N; i++ {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tb := populated(b, keys, cfg.opts...)
				runtime.GC()
				runtime.ReadMemStats(&after)
				total += float64(after.HeapAlloc-before.HeapAlloc) / benchKeys
				runtime.KeepAlive(tb)
			}
			b.ReportMetric(total/float64(b.N), "B/key")
		})
	}
}

// BenchmarkDebtMemory reports the debt memory apart from the store: a
// 100,000-key store takes twice as many keys, each taking the only token
// of its hour, so that every shard remembers debts; the debt memory is
// the heap freed by dropping it, per key of MaxKeys, for the default
// memory and a smaller one, and for every other kind at the default.
//
//	go test -run '^$' -bench DebtMemory -benchtime 3x .
func BenchmarkDebtMemory(b *testing.B) {
	tb := func(clk *tbClock, perKey int, opts ...Option) (debtLimiter, error) {
		l, err := NewTokenBucket(PerHour(1), append([]Option{WithClock(clk.Now), WithMaxKeys(benchKeys), WithDebtMemory(perKey)}, opts...)...)
		if err != nil {
			return debtLimiter{}, err
		}
		return debtLimiter{l, l.Stats, func() { dropDebts(l.store) }}, nil
	}
	for _, perKey := range []int{DefaultDebtsPerKey, 2} {
		b.Run(fmt.Sprintf("debts-per-key=%d", perKey), func(b *testing.B) {
			benchDebtMemory(b, func(clk *tbClock) (debtLimiter, error) { return tb(clk, perKey) })
		})
	}
	// The other kinds at the default: each debt in the same words.
	kinds := []struct {
		name  string
		build func(clk *tbClock) (debtLimiter, error)
	}{
		{"IntervalTokenBucket", func(clk *tbClock) (debtLimiter, error) {
			return tb(clk, DefaultDebtsPerKey, WithIntervalRefill())
		}},
		{"SlidingLog", func(clk *tbClock) (debtLimiter, error) {
			l, err := NewSlidingLog(PerHour(1), WithClock(clk.Now), WithMaxKeys(benchKeys))
			if err != nil {
				return debtLimiter{}, err
			}
			return debtLimiter{l, l.Stats, func() { dropDebts(l.store) }}, nil
		}},
		{"SlidingCounter", func(clk *tbClock) (debtLimiter, error) {
			l, err := NewSlidingCounter(PerHour(1), WithClock(clk.Now), WithMaxKeys(benchKeys))
			if err != nil {
				return debtLimiter{}, err
			}
			return debtLimiter{l, l.Stats, func() { dropDebts(l.store) }}, nil
		}},
	}
	for _, k := range kinds {
		b.Run(fmt.Sprintf("%s/debts-per-key=%d", k.name, DefaultDebtsPerKey), func(b *testing.B) {
			benchDebtMemory(b, k.build)
		})
	}
}

// debtLimiter is a limiter of BenchmarkDebtMemory, its Stats, and a
// function that drops its debt memory.
type debtLimiter struct {
	Limiter
	stats func() Stats
	drop  func()
}

func dropDebts[S any, A algorithm[S, A]](s *store[S, A]) {
	for i := range s.shards {
		s.shards[i].debts = nil
	}
}

// benchDebtMemory sprays a limiter that build makes with twice its
// keys, each taking the only unit of its hour, and reports the heap its
// debt memory holds per key of MaxKeys.
func benchDebtMemory(b *testing.B, build func(clk *tbClock) (debtLimiter, error)) {
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	keys := makeKeys(2 * benchKeys)
	var total float64
	for i := 0; i < b.N; i++ {
		l, err := build(newTBClock())
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for _, k := range keys {
			_, _ = l.AllowN(ctx, k, 1)
		}
		if st := l.stats(); st.EvictedLive < benchKeys {
			b.Fatalf("the spray evicted %d live keys, want %d or more", st.EvictedLive, benchKeys)
		}
		with := heap()
		l.drop()
		total += float64(with-heap()) / benchKeys
		runtime.KeepAlive(l)
	}
	b.ReportMetric(total/float64(b.N), "B/maxkey")
}

// BenchmarkCompositeHotKey: two token buckets on one key (a peek and a
// take each).
func BenchmarkCompositeHotKey(b *testing.B) {
	a, err := NewTokenBucket(hotRates[0].r)
	if err != nil {
		b.Fatal(err)
	}
	h, err := NewTokenBucket(hotRates[1].r)
	if err != nil {
		b.Fatal(err)
	}
	c, err := All(a, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var allowed int64
	for i := 0; i < b.N; i++ {
		d, _ := c.Allow(ctx, "203.0.113.7")
		if d.Allowed {
			allowed++
		}
	}
	reportAllowed(b, allowed)
}

// BenchmarkSharedLimiter: the rate.Limiter adapter, allowed decisions.
func BenchmarkSharedLimiter(b *testing.B) {
	s, err := FromRateLimiter(rate.NewLimiter(rate.Limit(1<<28), 1<<24))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var allowed int64
	for i := 0; i < b.N; i++ {
		d, _ := s.Allow(ctx, "")
		if d.Allowed {
			allowed++
		}
	}
	reportAllowed(b, allowed)
}

// BenchmarkSetRate: a change of rate on a store of 100,000 keys, each
// owing part of its quota, and a debt memory holding as many more (twice
// the keys the store holds passed through it): the cost of a change, per
// key converted (tracked or remembered), and the longest a shard was held.
// Each iteration changes between two rates, converting every key and
// debt.
//
//	go test -run '^$' -bench SetRate .
func BenchmarkSetRate(b *testing.B) {
	for _, how := range []Inherit{KeepUsed, ScaleUsed} {
		b.Run(how.String(), func(b *testing.B) {
			clk := newTBClock()
			tb, err := NewTokenBucket(Rate{Limit: 7, Period: time.Hour}, WithClock(clk.Now), WithMaxKeys(benchKeys))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, k := range makeKeys(2 * benchKeys) {
				_, _ = tb.AllowN(ctx, k, 3)
			}
			rates := [2]Rate{{Limit: 9, Period: 50 * time.Minute}, {Limit: 7, Period: time.Hour}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tb.SetRate(ctx, RateChange{Rate: rates[i%2], Inherit: how}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := tb.Stats()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.Keys+int(st.EvictedLive)), "ns/key")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tb.store.shards))/1e3, "µs/shard")
		})
	}
}
