package benchmarks

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	releaseReused()
	stopRedis()
	os.Exit(code)
}

// populatedKeys is the size of the key set of the "many keys" cases.
const populatedKeys = 100_000

// hotKey is the single client of the hot-key cases.
const hotKey = "203.0.113.7"

// build makes p's limiter for q and stops it when the test ends.
func build(tb testing.TB, p peer, q quota) instance {
	tb.Helper()
	inst, err := p.build(q)
	if err != nil {
		tb.Fatalf("%s: %v", p.name, err)
	}
	tb.Cleanup(inst.stop)
	return inst
}

// reused is the limiter of the sub-benchmark running now. The framework
// calls a benchmark function several times with growing b.N; keeping its
// limiter, already populated, saves building and populating 100,000 keys
// on every call. Benchmarks run one at a time, so it needs no lock.
var reused struct {
	name string
	inst instance
}

// reuse returns the running sub-benchmark's limiter for q, and whether it
// was just built (and so still has to be populated). The previous
// sub-benchmark's limiter is stopped and dropped.
func reuse(b *testing.B, p peer, q quota) (inst instance, fresh bool) {
	b.Helper()
	if reused.name == b.Name() {
		return reused.inst, false
	}
	releaseReused()
	inst, err := p.build(q)
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	reused.name, reused.inst = b.Name(), inst
	return inst, true
}

// releaseReused stops the kept limiter, if any.
func releaseReused() {
	if reused.inst.stop != nil {
		reused.inst.stop()
	}
	reused.name, reused.inst = "", instance{}
}

// populate makes one decision for each key, all of which must be allowed.
// It passes copies: a library that keeps the key string must later
// compare it with the timed calls' keys as it would with a new request's,
// not find the very same bytes.
func populate(tb testing.TB, p peer, call caller, keys []string) {
	tb.Helper()
	for _, k := range keys {
		if ok, err := call(strings.Clone(k)); err != nil || !ok {
			tb.Fatalf("%s: populating %q: allowed=%v err=%v, want allowed", p.name, k, ok, err)
		}
	}
}

// clientIPs returns n distinct client addresses.
func clientIPs(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = clientIP(i)
	}
	return keys
}

// okHandler is the application behind each middleware: it answers 200.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// newProbe returns the request of the middleware cases: the design's
// username-availability probe.
func newProbe() *http.Request {
	return httptest.NewRequest(http.MethodGet, "/auth/available/user_id?userId=alice", nil)
}

// cpuClock measures the CPU time a benchmark's loop used. On a machine
// shared with other work, wall time (ns/op) also counts the time this
// process waited for a core; CPU time per decision (cpu-ns/op) does not,
// so it is the steadier figure to compare libraries by. It includes the
// garbage collector's work, which belongs to the library that allocated.
type cpuClock struct {
	start int64
	ok    bool
}

// startCPU resets the benchmark timer and starts measuring CPU time.
func startCPU(b *testing.B) cpuClock {
	b.ReportAllocs()
	start, ok := processCPU()
	b.ResetTimer()
	return cpuClock{start: start, ok: ok}
}

// report stops the timer and reports the CPU time per iteration.
func (c cpuClock) report(b *testing.B) {
	b.StopTimer()
	end, ok := processCPU()
	if c.ok && ok && b.N > 0 {
		b.ReportMetric(float64(end-c.start)/float64(b.N), "cpu-ns/op")
	}
}
