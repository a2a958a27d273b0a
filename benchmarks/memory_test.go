package benchmarks

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
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

// curveSizes are the key counts of the cost curve (BenchmarkScaleCurve).
var curveSizes = []int{1_000, 10_000, 100_000, 1_000_000, 10_000_000}

// curveBig is the size from which the curve runs only when curveBigEnv
// is set to 1: ten million keys take a peer up to a few GiB and the
// curve some fifteen minutes, too much for every run on a shared machine.
const (
	curveBig    = 10_000_000
	curveBigEnv = "FLOODGATE_CURVE_10M"
)

// curveBigPeers are the peers measured at curveBig: those whose store
// holds ten million keys in under about 1.5 GB (throttled's and the
// hand-made LRU baseline's retain 150-220 B a key, over 2 GB, and twice
// that at a collection's peak).
var curveBigPeers = map[string]bool{"floodgate": true, "sethvargo": true, "httprate": true}

// curvePeer is a library of the cost curve: an in-memory limiter that
// can hold the curve's key counts, built to hold n keys where it takes a
// bound.
type curvePeer struct {
	name  string
	build func(q quota, n int) (instance, error)
}

func curvePeers() []curvePeer {
	unbounded := func(build func(quota) (instance, error)) func(quota, int) (instance, error) {
		return func(q quota, _ int) (instance, error) { return build(q) }
	}
	return []curvePeer{
		{"floodgate", buildFloodgateKeys},
		{"sethvargo", unbounded(buildSethvargo)},
		{"httprate", unbounded(buildHTTPRate)},
		{"throttled", buildThrottledKeys},
		{"x/time/rate+LRU", buildBaselineKeys},
	}
}

// curveDecisions is how many decisions a measurement times, serial and
// parallel alike.
const curveDecisions = 1_000_000

// curveRounds is the rounds of BenchmarkScaleCurve per iteration: run it
// with -benchtime 1x.
const curveRounds = 3

// BenchmarkScaleCurve is the cost curve of issue 33: for each key count
// N, each library holding N keys (built for N where it takes a bound,
// populated with one decision per key) is measured in turn, in
// curveRounds rounds that rotate the order, and the medians of the rounds
// are reported:
//
//   - serial: ns per allowed decision from one goroutine, over the N keys
//     in a random order, wall and CPU time (the process's);
//   - parallel: ns per decision with GOMAXPROCS goroutines, wall, and CPU
//     time of all of them (so about twice the wall time on two cores);
//   - B/key: heap retained per key after populating (keys passed as
//     fresh copies, so a library that keeps them pays for them);
//   - gc-ms/cycle: GC CPU time per cycle, forced, with only that
//     library's state and the curve's pointer-free key arena live;
//   - floodgate's ratios to the best peer, serial and parallel.
//
// Only one library is live at a time. Ten million keys run only with
// FLOODGATE_CURVE_10M=1, and only for the peers of curveBigPeers. Run it
// with
//
//	go test -run '^$' -bench ScaleCurve -benchtime 1x -timeout 3h
//
// or as the report suite "curve" (go run ./cmd/report -suite curve),
// which writes reports/curve.md with the load and date it ran under.
// Each row of the Markdown table is also logged (-v).
func BenchmarkScaleCurve(b *testing.B) {
	for _, n := range curveSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			if n >= curveBig && os.Getenv(curveBigEnv) != "1" {
				b.Skipf("%d keys: set %s=1 (a few GiB, some fifteen minutes)", n, curveBigEnv)
			}
			benchScaleCurve(b, n)
		})
	}
}

// curveFigures are one library's measurements at one size: wall and CPU
// nanoseconds per decision, serial and parallel, bytes per key and GC
// milliseconds per cycle.
type curveFigures struct{ serial, parallel, serialCPU, parallelCPU, bytes, gc []float64 }

func benchScaleCurve(b *testing.B, n int) {
	keys := newKeyArena(n)
	order := rand.New(rand.NewPCG(uint64(n), 1)).Perm(n)
	peers := curvePeers()
	if n >= curveBig {
		peers = slices.DeleteFunc(peers, func(p curvePeer) bool { return !curveBigPeers[p.name] })
	}
	figs := make([]curveFigures, len(peers))
	b.ResetTimer()
	for round := 0; round < curveRounds*b.N; round++ {
		for k := range peers {
			i := (round + k) % len(peers)
			measureCurve(b, peers[i], n, keys, order, &figs[i])
		}
	}
	b.StopTimer()
	row := fmt.Sprintf("| %d |", n)
	best := [4]float64{math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)}
	var fg [4]float64
	for i, p := range peers {
		f := &figs[i]
		m := [4]float64{median(f.serial), median(f.parallel), median(f.serialCPU), median(f.parallelCPU)}
		b.ReportMetric(m[0], p.name+"-serial-ns")
		b.ReportMetric(m[1], p.name+"-parallel-ns")
		b.ReportMetric(m[2], p.name+"-serial-cpu-ns")
		b.ReportMetric(m[3], p.name+"-parallel-cpu-ns")
		b.ReportMetric(median(f.bytes), p.name+"-B/key")
		b.ReportMetric(median(f.gc), p.name+"-gc-ms/cycle")
		row += fmt.Sprintf(" %.0f / %.0f / %.0f / %.2f |", m[0], m[1], median(f.bytes), median(f.gc))
		if p.name == "floodgate" {
			fg = m
			continue
		}
		for k := range best {
			best[k] = min(best[k], m[k])
		}
	}
	b.ReportMetric(fg[0]/best[0], "serial/best")
	b.ReportMetric(fg[1]/best[1], "parallel/best")
	b.ReportMetric(fg[2]/best[2], "serial-cpu/best")
	b.ReportMetric(fg[3]/best[3], "parallel-cpu/best")
	b.ReportMetric(0, "ns/op") // a round is not an operation
	b.Logf("%s %.2f / %.2f (CPU %.2f / %.2f) |", row, fg[0]/best[0], fg[1]/best[1], fg[2]/best[2], fg[3]/best[3])
}

// measureCurve builds p for n keys, populates it, and appends its
// figures to f.
func measureCurve(b *testing.B, p curvePeer, n int, keys *keyArena, order []int, f *curveFigures) {
	runtime.GC()
	before := liveHeap()
	inst, err := p.build(allowQuota, n)
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	call := inst.newCaller()
	for i := 0; i < n; i++ {
		if ok, err := call(strings.Clone(keys.key(i))); err != nil || !ok {
			b.Fatalf("%s: populating key %d: allowed=%v err=%v, want allowed", p.name, i, ok, err)
		}
	}
	f.bytes = append(f.bytes, float64(liveHeap()-before)/float64(n))
	f.gc = append(f.gc, gcPerCycle()*1e3)
	start, cpu := time.Now(), mustCPU(b)
	for j := 0; j < curveDecisions; j++ {
		if ok, err := call(keys.key(order[j%n])); err != nil || !ok {
			b.Fatalf("%s: decision on key %d: allowed=%v err=%v, want allowed", p.name, order[j%n], ok, err)
		}
	}
	f.serial = append(f.serial, float64(time.Since(start).Nanoseconds())/curveDecisions)
	f.serialCPU = append(f.serialCPU, float64(mustCPU(b)-cpu)/curveDecisions)
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	var failed atomic.Bool
	start, cpu = time.Now(), mustCPU(b)
	for g := 0; g < procs; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call := inst.newCaller()
			for j := g; j < curveDecisions; j += procs {
				// Each goroutine walks the order from its own place.
				k := order[(j+g*n/procs)%n]
				if ok, err := call(keys.key(k)); err != nil || !ok {
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	f.parallel = append(f.parallel, float64(time.Since(start).Nanoseconds())/curveDecisions)
	f.parallelCPU = append(f.parallelCPU, float64(mustCPU(b)-cpu)/curveDecisions)
	if failed.Load() {
		b.Fatalf("%s: a parallel decision was not allowed", p.name)
	}
	inst.stop()
	runtime.KeepAlive(call)
}

// mustCPU returns the process's CPU time (see processCPU).
func mustCPU(b *testing.B) int64 {
	ns, ok := processCPU()
	if !ok {
		b.Fatal("no process CPU time on this platform")
	}
	return ns
}

// liveHeap returns the heap in use after a full GC.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// gcPerCycle returns the GC CPU time, in seconds, per cycle of a few
// forced ones.
func gcPerCycle() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	cpu, cycles := s[0].Value.Float64(), s[1].Value.Uint64()
	for range 5 {
		runtime.GC()
	}
	metrics.Read(s)
	return (s[0].Value.Float64() - cpu) / float64(s[1].Value.Uint64()-cycles)
}

// keyArena holds n client addresses in one pointer-free allocation, so
// that the keys themselves cost the garbage collector nothing, and hands
// them out without allocating.
type keyArena struct {
	bytes []byte
	ends  []uint32
}

func newKeyArena(n int) *keyArena {
	a := &keyArena{ends: make([]uint32, n)}
	for i := 0; i < n; i++ {
		a.bytes = fmt.Appendf(a.bytes, "%d.%d.%d.%d", 10+byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
		a.ends[i] = uint32(len(a.bytes))
	}
	return a
}

// key returns the i-th key, pointing into the arena.
func (a *keyArena) key(i int) string {
	start := uint32(0)
	if i > 0 {
		start = a.ends[i-1]
	}
	return unsafe.String(&a.bytes[start], int(a.ends[i]-start))
}
