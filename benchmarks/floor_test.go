package benchmarks

import (
	"hash/maphash"
	"sync"
	"testing"
	"time"
)

// floorSink keeps the compiler from dropping the measured work.
var floorSink int64

// BenchmarkFloor measures, alone, the steps every in-memory decision is
// made of: reading the clock (monotonic only, as floodgate does; wall and
// monotonic, as time.Now and sethvargo's fasttime do), an uncontended mutex,
// and hashing a key. No decision can cost less than the steps it takes, so
// these bound the ratio any limiter can reach against another.
// cmd/report does not run them; run them with
//
//	go test -run '^$' -bench Floor
func BenchmarkFloor(b *testing.B) {
	b.Run("time.Since", func(b *testing.B) {
		epoch := time.Now()
		cpu := startCPU(b)
		defer cpu.report(b)
		for i := 0; i < b.N; i++ {
			floorSink += int64(time.Since(epoch))
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		cpu := startCPU(b)
		defer cpu.report(b)
		for i := 0; i < b.N; i++ {
			floorSink += time.Now().UnixNano()
		}
	})
	b.Run("mutex", func(b *testing.B) {
		var mu sync.Mutex
		cpu := startCPU(b)
		defer cpu.report(b)
		for i := 0; i < b.N; i++ {
			mu.Lock()
			floorSink++
			mu.Unlock()
		}
	})
	b.Run("maphash", func(b *testing.B) {
		seed := maphash.MakeSeed()
		cpu := startCPU(b)
		defer cpu.report(b)
		for i := 0; i < b.N; i++ {
			floorSink += int64(maphash.String(seed, hotKey))
		}
	})
}
