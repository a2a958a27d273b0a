package floodgate

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// scaleSizes are the key counts of BenchmarkScale: a store sized
// exactly for them (WithMaxKeys), filled, then decided on at random.
var scaleSizes = []int{1_000, 10_000, 100_000, 1_000_000, 10_000_000}

// scaleRate never runs dry on the system clock (see hotRates).
var scaleRate = Rate{Limit: 1 << 24, Period: time.Second >> 4}

// scaleKeys holds n distinct IPv4-like keys in one pointer-free arena, so
// that they cost the garbage collector nothing (the GC figures are the
// store's), and hands them out without allocating.
type scaleKeys struct {
	arena []byte
	ends  []uint32
}

func newScaleKeys(n int) *scaleKeys {
	k := &scaleKeys{ends: make([]uint32, n)}
	for i := range k.ends {
		k.arena = fmt.Appendf(k.arena, "%d.%d.%d.%d", 10+byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
		k.ends[i] = uint32(len(k.arena))
	}
	return k
}

// key returns the i-th key.
func (k *scaleKeys) key(i int) string {
	start := uint32(0)
	if i > 0 {
		start = k.ends[i-1]
	}
	return unsafe.String(&k.arena[start], int(k.ends[i]-start))
}

// BenchmarkScale times an allowed token-bucket decision on a store of N
// keys sized for them (WithMaxKeys(N)), serial and parallel, in a random
// order of the keys, and reports the store's evictions (there must be
// none) and the heap it retains per key, and the GC CPU per cycle with
// the store live.
//
//	go test -run '^$' -bench Scale -benchtime 2000000x .
func BenchmarkScale(b *testing.B) {
	for _, n := range scaleSizes {
		keys := newScaleKeys(n)
		order := scaleOrder(n)
		var tb *TokenBucket
		var bytesPerKey float64
		setup := func(b *testing.B) {
			if tb != nil {
				return
			}
			before := heapAlloc()
			var err error
			tb, err = NewTokenBucket(scaleRate, WithMaxKeys(n))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < n; i++ {
				if d, err := tb.Allow(ctx, keys.key(i)); err != nil || !d.Allowed {
					b.Fatalf("populating %s: %+v %v", keys.key(i), d, err)
				}
			}
			bytesPerKey = float64(heapAlloc()-before) / float64(n)
		}
		b.Run(fmt.Sprintf("keys=%d/serial", n), func(b *testing.B) {
			setup(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d, _ := tb.Allow(ctx, keys.key(int(order[i%n]))); !d.Allowed {
					b.Fatal("denied")
				}
			}
			b.StopTimer()
			b.ReportMetric(bytesPerKey, "B/key")
			st := tb.Stats()
			b.ReportMetric(float64(st.EvictedIdle+st.EvictedLive), "evictions")
			b.ReportMetric(gcPerCycle()*1e3, "gc-ms/cycle")
			b.ReportMetric(float64(gcScanned()), "gc-scan-bytes")
		})
		b.Run(fmt.Sprintf("keys=%d/parallel", n), func(b *testing.B) {
			setup(b)
			ctx := context.Background()
			var start atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(start.Add(1)) * 7919
				for pb.Next() {
					if d, _ := tb.Allow(ctx, keys.key(int(order[i%n]))); !d.Allowed {
						panic("denied")
					}
					i++
				}
			})
		})
		tb = nil
		runtime.GC()
	}
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// gcPerCycle returns the GC CPU seconds per cycle over a few forced
// cycles.
func gcPerCycle() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	cpu0, n0 := s[0].Value.Float64(), s[1].Value.Uint64()
	for range 4 {
		runtime.GC()
	}
	metrics.Read(s)
	return (s[0].Value.Float64() - cpu0) / float64(s[1].Value.Uint64()-n0)
}

// BenchmarkStoreLayout times the same token-bucket decisions through the
// store of issue 33 (new) and the one before it (old), each sized for N
// keys and filled with them, in interleaved rounds (-benchtime 9x: nine
// rounds) of 200,000 decisions each, serial and from GOMAXPROCS
// goroutines, and reports the medians and their ratio, which the load
// of a shared machine affects least. Times are the process's CPU time
// per decision (user and system; the parallel figure is the CPU all
// goroutines spent, so twice the wall time on two cores when nothing
// waits): on a loaded machine wall time counts the waits for a core.
//
//	go test -run '^$' -bench StoreLayout -benchtime 9x .
func BenchmarkStoreLayout(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys := newScaleKeys(n)
			order := scaleOrder(n)
			decide := [2]func(key string) bool{layoutStore(b, n, true), layoutStore(b, n, false)}
			for i := 0; i < n; i++ {
				decide[0](keys.key(i))
				decide[1](keys.key(i))
			}
			const per = 200_000
			var serial, parallel [2][]float64
			b.ResetTimer()
			for round := 0; round < b.N; round++ {
				for k := range 2 {
					s := (round + k) % 2
					start := cpuNanos()
					for i := 0; i < per; i++ {
						if !decide[s](keys.key(int(order[(round*per+i)%n]))) {
							b.Fatal("denied")
						}
					}
					serial[s] = append(serial[s], float64(cpuNanos()-start)/per)
					start = cpuNanos()
					procs := runtime.GOMAXPROCS(0)
					var wg sync.WaitGroup
					for g := 0; g < procs; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := g; i < per; i += procs {
								decide[s](keys.key(int(order[(round*per+i+g*n/procs)%n])))
							}
						}()
					}
					wg.Wait()
					parallel[s] = append(parallel[s], float64(cpuNanos()-start)/per)
				}
			}
			b.StopTimer()
			for s, name := range [2]string{"old", "new"} {
				b.ReportMetric(medianOf(serial[s]), name+"-serial-ns")
				b.ReportMetric(medianOf(parallel[s]), name+"-parallel-ns")
			}
			b.ReportMetric(medianOf(serial[1])/medianOf(serial[0]), "new/old-serial")
			b.ReportMetric(medianOf(parallel[1])/medianOf(parallel[0]), "new/old-parallel")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// layoutStore returns a decision on a token bucket store of n keys: the
// old one or the new.
func layoutStore(b *testing.B, n int, old bool) func(key string) bool {
	c, err := newConfig(kindTokenBucket, []Option{WithMaxKeys(n)})
	if err != nil {
		b.Fatal(err)
	}
	a, err := newTBAlg(scaleRate, scaleRate.Limit, false, c.debt)
	if err != nil {
		b.Fatal(err)
	}
	if old {
		st, err := newOldStore[tbState](c, a)
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) bool {
			var d Decision
			_ = st.run(key, true, func(a *tbAlg, s *tbState, now int64) { a.decide(&d, s, now, 1) })
			return d.Allowed
		}
	}
	st, err := newStore[tbState](c, a)
	if err != nil {
		b.Fatal(err)
	}
	return func(key string) bool {
		var d Decision
		_ = st.run(key, true, func(a *tbAlg, s *tbState, now int64) { a.decide(&d, s, now, 1) })
		return d.Allowed
	}
}

// medianOf returns the median of xs (which it sorts).
func medianOf(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// scaleOrder returns a random order of n keys, pointer-free.
func scaleOrder(n int) []int32 {
	order := make([]int32, n)
	for i, j := range rand.New(rand.NewSource(1)).Perm(n) {
		order[i] = int32(j)
	}
	return order
}

// gcScanned returns the bytes of heap, stacks and globals the last GC
// cycle scanned: the collector's work, which unlike its CPU time does not
// depend on what else the machine runs.
func gcScanned() uint64 {
	s := []metrics.Sample{{Name: "/gc/scan/total:bytes"}}
	runtime.GC()
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// cpuNanos returns the CPU time the process has used, user and system.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
