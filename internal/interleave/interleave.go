package interleave

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// Case is one way of serving a call: Call makes one call and reports its
// error.
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
	// Allocs is the heap objects allocated per call over all rounds.
	Allocs float64
}

// Run calls every case batch times a round, in turn, for rounds rounds,
// and returns what each cost. It stops at the first error.
func Run(cases []Case, rounds, batch int) ([]Result, error) {
	res := make([]Result, len(cases))
	mallocs := make([]uint64, len(cases))
	for i, c := range cases {
		res[i].Name = c.Name
	}
	var ms runtime.MemStats
	for range rounds {
		for i, c := range cases {
			runtime.ReadMemStats(&ms)
			before, cpuBefore := ms.Mallocs, processCPU()
			for range batch {
				if err := c.Call(); err != nil {
					return nil, fmt.Errorf("%s: %w", c.Name, err)
				}
			}
			cpuAfter := processCPU()
			runtime.ReadMemStats(&ms)
			mallocs[i] += ms.Mallocs - before
			if cpuBefore >= 0 && cpuAfter >= 0 {
				res[i].CPU = append(res[i].CPU, float64(cpuAfter-cpuBefore)/float64(batch))
			}
		}
	}
	for i := range res {
		res[i].Allocs = float64(mallocs[i]) / float64(rounds*batch)
	}
	return res, nil
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
		out = append(out, o)
	}
	return out
}

// quantile returns the q-quantile of sorted values, the nearest rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// Bench runs the cases as benchmark b: b.N calls of each, in rounds of
// batch, and reports for each case after the first its overhead over
// the first as metrics named after it: "<name>-cpu-ns/call" (the median
// of the rounds' differences) and "<name>-allocs/call", and the
// baseline's own "base-cpu-ns/call" and "base-allocs/call".
func Bench(b *testing.B, cases []Case, batch int) []Overhead {
	b.Helper()
	rounds := max((b.N+batch-1)/batch, 1)
	b.ResetTimer()
	res, err := Run(cases, rounds, batch)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
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
		}
		if o.HasCPU && rounds >= 10 { // not the framework's first run of one call
			b.Logf("%s over %s: %+.0f ns CPU a call (quartiles %+.0f, %+.0f; %d rounds of %d), %+.2f allocations",
				o.Name, cases[0].Name, o.CPU, o.CPULow, o.CPUHigh, rounds, batch, o.Allocs)
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
