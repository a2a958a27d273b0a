package interleave

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Case is one way of serving a call: Call makes one call and reports its
// error. RunSaturated calls it from many goroutines at once.
type Case struct {
	Name string
	Call func() error
}

// Result is what Run measured of a case.
type Result struct {
	Name string
	// CPU is the case's CPU time per call in each batch, in ns (one a
	// round, but the baseline's RunSaturated runs more); nil where the
	// platform cannot read it.
	CPU []float64
	// Base is the baseline's CPU time per call each reading of CPU is
	// set against, where it is not the first case's reading of the same
	// round (RunSaturated's mean of the two around it); else nil.
	Base []float64
	// Cores is the CPU time over the wall time of each batch: how many
	// cores the process kept busy while the case ran (nil where CPU is).
	Cores []float64
	// Allocs is the heap objects allocated per call over all rounds.
	Allocs float64
}

// Run calls every case batch times a round, in turn, for rounds rounds,
// and returns what each cost. It stops at the first error.
func Run(cases []Case, rounds, batch int) ([]Result, error) {
	m := newMeter(cases, 0)
	for range rounds {
		for i, c := range cases {
			_, _, err := m.measure(i, batch, func() error {
				for range batch {
					if err := c.Call(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
		}
	}
	return m.results(), nil
}

// RunSaturated is Run with each batch of calls made by workers
// goroutines at once, so that the process keeps every core busy. Run's
// serial calls leave the cores idle between a call and its answer, and
// the Go runtime's threads spin looking for work there: on an idle
// machine that spinning, which varies from round to round, is most of a
// call's CPU time and hides microseconds. With calls always waiting to
// run, there is nothing to spin for, and a batch's CPU time is the
// calls' own work.
//
// A round runs the baseline (the first case), then each other case
// followed by the baseline again, the cases in a new random order each
// round (from a fixed seed); each case's reading is set against the
// mean of the two baseline batches around it (Result.Base), so that a
// load that drifts within a round weighs on both sides alike, and the
// random order spreads what one case leaves to the next over all cases.
//
// Each reading of the CPU time comes after settleTime idle: the kernel
// adds a thread's time to the process's when the thread stops or at a
// timer tick (every 4 ms at 250 Hz), so a reading taken while another
// thread runs misses up to a tick of it, 4 µs a call in a batch of
// 1,000; idle, every thread has stopped, and a garbage collection the
// batch set off has ended and is counted in the batch that set it off.
// The idle time's own CPU (threads parking) is the same for every case.
//
// Before the first round every case runs one unmeasured batch, so that
// connections, streams and goroutine stacks have grown to the load.
func RunSaturated(cases []Case, rounds, batch, workers int) ([]Result, error) {
	for _, c := range cases {
		if err := callAtOnce(c.Call, batch, workers); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	m := newMeter(cases, settleTime)
	run := func(i int) (float64, bool, error) {
		cpu, ok, err := m.measure(i, batch, func() error { return callAtOnce(cases[i].Call, batch, workers) })
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", cases[i].Name, err)
		}
		return cpu, ok, nil
	}
	others := make([]int, len(cases)-1)
	for i := range others {
		others[i] = i + 1
	}
	rng := rand.New(rand.NewPCG(1, 31)) // the same orders in every run
	for range rounds {
		rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		before, okBefore, err := run(0)
		if err != nil {
			return nil, err
		}
		for _, i := range others {
			_, ok, err := run(i)
			if err != nil {
				return nil, err
			}
			after, okAfter, err := run(0)
			if err != nil {
				return nil, err
			}
			if ok && okBefore && okAfter {
				m.res[i].Base = append(m.res[i].Base, (before+after)/2)
			}
			before, okBefore = after, okAfter
		}
	}
	return m.results(), nil
}

// settleTime is how long RunSaturated idles before each reading of the
// CPU time: longer than a tick and than a garbage collection of a small
// heap.
const settleTime = 5 * time.Millisecond

// callAtOnce makes calls of call from workers goroutines, each taking
// the next call until there are none left, and returns the first error;
// after an error the others stop at their next call.
func callAtOnce(call func() error, calls, workers int) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(calls) {
				if err := call(); err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(calls))
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// meter records each case's CPU time, cores and allocations per batch.
type meter struct {
	res     []Result
	mallocs []uint64
	calls   []int
	ms      runtime.MemStats
	// settle is how long the process idles before each reading of the
	// CPU time (RunSaturated's settleTime; none for Run).
	settle time.Duration
}

func newMeter(cases []Case, settle time.Duration) *meter {
	m := &meter{res: make([]Result, len(cases)), mallocs: make([]uint64, len(cases)), calls: make([]int, len(cases)), settle: settle}
	for i, c := range cases {
		m.res[i].Name = c.Name
	}
	return m
}

// measure runs batch calls of case i through calls, records what they
// cost and returns their CPU time per call, if it could be read.
func (m *meter) measure(i, batch int, calls func() error) (float64, bool, error) {
	time.Sleep(m.settle)
	runtime.ReadMemStats(&m.ms)
	before, cpuBefore, start := m.ms.Mallocs, processCPU(), time.Now()
	if err := calls(); err != nil {
		return 0, false, err
	}
	wall := time.Since(start)
	time.Sleep(m.settle)
	cpuAfter := processCPU()
	runtime.ReadMemStats(&m.ms)
	m.mallocs[i] += m.ms.Mallocs - before
	m.calls[i] += batch
	if cpuBefore < 0 || cpuAfter < 0 {
		return 0, false, nil
	}
	r, cpu := &m.res[i], float64(cpuAfter-cpuBefore)/float64(batch)
	r.CPU = append(r.CPU, cpu)
	if wall > 0 {
		r.Cores = append(r.Cores, float64(cpuAfter-cpuBefore)/float64(wall))
	}
	return cpu, true, nil
}

// results returns what was measured of each case.
func (m *meter) results() []Result {
	for i := range m.res {
		m.res[i].Allocs = float64(m.mallocs[i]) / float64(max(m.calls[i], 1))
	}
	return m.res
}

// Overhead is a case's cost over the baseline (the first case): the
// median over rounds of the CPU time per call it took more than the
// baseline in the same round (than Result.Base, where set), and the
// allocations per call it made more.
type Overhead struct {
	Name      string
	CPU       float64 // ns per call, the median of the rounds' differences
	CPULow    float64 // the first quartile of the rounds' differences
	CPUHigh   float64 // the third quartile
	Allocs    float64
	HasCPU    bool
	BaseCPU   float64 // the baseline's median CPU per call, ns
	BaseCores float64 // the baseline's median cores busy in a round
	BaseAlloc float64 // the baseline's allocations per call
}

// Overheads returns the overhead of every case after the first over it.
func Overheads(res []Result) []Overhead {
	if len(res) == 0 {
		return nil
	}
	base := res[0]
	var out []Overhead
	for _, r := range res[1:] {
		o := Overhead{Name: r.Name, Allocs: r.Allocs - base.Allocs, BaseAlloc: base.Allocs}
		against := base.CPU
		if r.Base != nil {
			against = r.Base
		}
		if len(r.CPU) == len(against) && len(r.CPU) > 0 {
			diff := make([]float64, len(r.CPU))
			for i := range diff {
				diff[i] = r.CPU[i] - against[i]
			}
			slices.Sort(diff)
			o.CPU, o.CPULow, o.CPUHigh = quantile(diff, 0.5), quantile(diff, 0.25), quantile(diff, 0.75)
			o.BaseCPU = quantile(slices.Sorted(slices.Values(base.CPU)), 0.5)
			o.HasCPU = true
		}
		if len(base.Cores) > 0 {
			o.BaseCores = quantile(slices.Sorted(slices.Values(base.Cores)), 0.5)
		}
		out = append(out, o)
	}
	return out
}

// quantile returns the q-quantile of sorted values, the nearest rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// Bench runs the cases as benchmark b with Run: b.N calls of each, in
// rounds of batch, and reports for each case after the first its
// overhead over the first as metrics named after it:
// "<name>-cpu-ns/call" (the median of the rounds' differences),
// "<name>-cpu-q1-ns/call" and "<name>-cpu-q3-ns/call" (their
// quartiles) and "<name>-allocs/call", and the baseline's own
// "base-cpu-ns/call" and "base-allocs/call".
func Bench(b *testing.B, cases []Case, batch int) []Overhead {
	b.Helper()
	rounds := max((b.N+batch-1)/batch, 1)
	b.ResetTimer()
	res, err := Run(cases, rounds, batch)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	return report(b, cases, res, rounds, fmt.Sprintf("%d rounds of %d", rounds, batch))
}

// BenchSaturated is Bench with RunSaturated: each round's batch of calls
// made by workers goroutines at once. Besides Bench's metrics it reports
// "base-cores" (the median over batches of the cores the process kept
// busy while the baseline ran: below the machine's count, something
// other than the calls held the cores, or the calls could not fill them).
func BenchSaturated(b *testing.B, cases []Case, batch, workers int) []Overhead {
	b.Helper()
	rounds := max((b.N+batch-1)/batch, 1)
	b.ResetTimer()
	res, err := RunSaturated(cases, rounds, batch, workers)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	over := report(b, cases, res, rounds, fmt.Sprintf("%d rounds of %d, %d callers", rounds, batch, workers))
	if len(over) > 0 && over[0].HasCPU {
		b.ReportMetric(over[0].BaseCores, "base-cores")
	}
	return over
}

// report reports the overheads of res as Bench's metrics, and logs them
// once there are enough rounds for quartiles to mean anything.
func report(b *testing.B, cases []Case, res []Result, rounds int, how string) []Overhead {
	b.Helper()
	over := Overheads(res)
	if len(over) > 0 {
		b.ReportMetric(over[0].BaseAlloc, "base-allocs/call")
		if over[0].HasCPU {
			b.ReportMetric(over[0].BaseCPU, "base-cpu-ns/call")
		}
	}
	for _, o := range over {
		b.ReportMetric(o.Allocs, o.Name+"-allocs/call")
		if o.HasCPU {
			b.ReportMetric(o.CPU, o.Name+"-cpu-ns/call")
			b.ReportMetric(o.CPULow, o.Name+"-cpu-q1-ns/call")
			b.ReportMetric(o.CPUHigh, o.Name+"-cpu-q3-ns/call")
		}
		if o.HasCPU && rounds >= 10 { // not the framework's first run of one call
			b.Logf("%s over %s: %+.0f ns CPU a call (quartiles %+.0f, %+.0f; %s), %+.2f allocations",
				o.Name, cases[0].Name, o.CPU, o.CPULow, o.CPUHigh, how, o.Allocs)
		}
	}
	return over
}

// MallocsPerRun returns the heap allocations per call of f over runs
// calls, after one to warm up, unrounded: testing.AllocsPerRun rounds
// down, which would hide a fraction (a share of a block of values).
func MallocsPerRun(runs int, f func()) float64 {
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}
