package benchmarks

import (
	"runtime"
	"testing"
)

// BenchmarkMemory reports the heap each library retains per tracked key
// (B/key) once 100,000 keys have made one decision each, under the
// design's username-probe quota. Each key is built afresh for the call and
// dropped by the caller, so a library that keeps the key string pays for
// it. max-keys is the library's key bound, 0 if it has none. ns/op is the time to populate the 100,000 keys, key building
// included.
func BenchmarkMemory(b *testing.B) {
	for _, p := range peers() {
		b.Run("100k/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			var sum float64
			for i := 0; i < b.N; i++ {
				sum += bytesPerKey(b, p)
			}
			b.ReportMetric(sum/float64(b.N), "B/key")
			b.ReportMetric(float64(p.maxKeys), "max-keys")
		})
	}
}

// bytesPerKey builds a limiter, populates it and returns the growth of the
// live heap per key, measured after a full GC on both sides.
func bytesPerKey(b *testing.B, p peer) float64 {
	b.StopTimer()
	inst, err := p.build(memQuota)
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	defer inst.stop()
	call := inst.newCaller()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.StartTimer()
	for i := 0; i < populatedKeys; i++ {
		if ok, err := call(clientIP(i)); err != nil || !ok {
			b.Fatalf("%s: populating key %d: allowed=%v err=%v, want allowed", p.name, i, ok, err)
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The limiter must still be reachable when the heap is read.
	runtime.KeepAlive(call)
	b.StartTimer()
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / populatedKeys
}
