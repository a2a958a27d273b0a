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
	// CPU is the case's CPU time per call in each round, in ns; nil
	// where the platform cannot read it.
	CPU []float64
	// Cores is the CPU time over the wall time of each round: how many
	// cores the process kept busy while the case ran (nil where CPU is).
	Cores []float64
	// Allocs is the heap objects allocated per call over all rounds.
	Allocs float64
}

// Run calls every case batch times a round, in turn, for rounds rounds,
// and returns what each cost. It stops at the first error.
func Run(cases []Case, rounds, batch int) ([]Result, error) {
	m := newMeter(cases)
	for range rounds {
		for i, c := range cases {
			err := m.measure(i, batch, func() error {
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
	return m.results(rounds * batch), nil
}

// RunSaturated is Run with each batch of calls made by workers
// goroutines at once, so that the process keeps every core busy; the
// cases run in a new random order each round (from a fixed seed). Run's
// serial calls leave the cores idle between a call and its answer, and
// the Go runtime's threads spin looking for work there: on an idle
// machine that spinning, which varies from round to round, is most of a
// call's CPU time and hides microseconds. With calls always waiting to
// run, there is nothing to spin for, and a round's CPU time is the
// calls' own work. The random order spreads what one case leaves to
// the next (a garbage collection it set off) over all cases alike.
//
// Before the first round every case runs one unmeasured batch, so that
// connections, streams and goroutine stacks have grown to the load.
func RunSaturated(cases []Case, rounds, batch, workers int) ([]Result, error) {
	for _, c := range cases {
		if err := callAtOnce(c.Call, batch, workers); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	m := newMeter(cases)
	order := make([]int, len(cases))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(1, 31)) // the same orders in every run
	for range rounds {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			if err := m.measure(i, batch, func() error { return callAtOnce(cases[i].Call, batch, workers) }); err != nil {
				return nil, fmt.Errorf("%s: %w", cases[i].Name, err)
			}
		}
	}
	return m.results(rounds * batch), nil
}

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

// meter records each case's CPU time, cores and allocations per round.
type meter struct {
	res     []Result
	mallocs []uint64
	ms      runtime.MemStats
}

func newMeter(cases []Case) *meter {
	m := &meter{res: make([]Result, len(cases)), mallocs: make([]uint64, len(cases))}
	for i, c := range cases {
		m.res[i].Name = c.Name
	}
	return m
}

// measure runs batch calls of case i through calls and records what
// they cost.
func (m *meter) measure(i, batch int, calls func() error) error {
	runtime.ReadMemStats(&m.ms)
	before, cpuBefore, start := m.ms.Mallocs, processCPU(), time.Now()
	if err := calls(); err != nil {
		return err
	}
	cpuAfter, wall := processCPU(), time.Since(start)
	runtime.ReadMemStats(&m.ms)
	m.mallocs[i] += m.ms.Mallocs - before
	if cpuBefore >= 0 && cpuAfter >= 0 {
		r := &m.res[i]
		r.CPU = append(r.CPU, float64(cpuAfter-cpuBefore)/float64(batch))
		if wall > 0 {
			r.Cores = append(r.Cores, float64(cpuAfter-cpuBefore)/float64(wall))
		}
	}
	return nil
}

// results returns what was measured over calls calls of each case.
func (m *meter) results(calls int) []Result {
	for i := range m.res {
		m.res[i].Allocs = float64(m.mallocs[i]) / float64(calls)
	}
	return m.res
}

// Overhead is a case's cost over the baseline (the first case): the
// median over rounds of the CPU time per call it took more in the same
// round, and the allocations per call it made more.
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
		if len(r.CPU) == len(base.CPU) && len(r.CPU) > 0 {
			diff := make([]float64, len(r.CPU))
			for i := range diff {
				diff[i] = r.CPU[i] - base.CPU[i]
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
// "base-cores" (the median over rounds of the cores the process kept
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
