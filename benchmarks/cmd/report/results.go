package main

import (
	"bufio"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// results holds every figure of every round, by case and library.
type results struct {
	// figures maps "Decision/hot/floodgate" to its values, by unit.
	figures map[string]map[string][]float64
	// cases and libs keep the order in which they were first seen.
	cases    []string
	libs     map[string][]string
	failures []string
}

func newResults() *results {
	return &results{figures: map[string]map[string][]float64{}, libs: map[string][]string{}}
}

// benchLine matches a go test -bench result line:
// "BenchmarkDecision/hot/floodgate-2   123456   98.7 ns/op   0 B/op ...".
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// parse reads go test -bench output and records its figures.
func (r *results) parse(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := m[1]
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			continue
		}
		c, lib := name[:i], name[i+1:]
		f := strings.Fields(m[2])
		for j := 0; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				continue
			}
			r.add(c, lib, f[j+1], v)
		}
	}
}

func (r *results) add(c, lib, unit string, v float64) {
	name := c + "/" + lib
	if r.figures[name] == nil {
		r.figures[name] = map[string][]float64{}
		if r.libs[c] == nil {
			r.cases = append(r.cases, c)
		}
		r.libs[c] = append(r.libs[c], lib)
	}
	r.figures[name][unit] = append(r.figures[name][unit], v)
}

// median returns the median of the case's values in unit, and whether
// there were any.
func (r *results) median(c, lib, unit string) (float64, bool) {
	vs := append([]float64(nil), r.figures[c+"/"+lib][unit]...)
	if len(vs) == 0 {
		return 0, false
	}
	sort.Float64s(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], true
	}
	return (vs[n/2-1] + vs[n/2]) / 2, true
}

// failLine matches the line go test prints for a failed benchmark.
var failLine = regexp.MustCompile(`--- FAIL: Benchmark(\S+?)(?:-\d+)?$`)

// failedNames returns the benchmarks that failed in out.
func failedNames(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if m := failLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil && strings.Count(m[1], "/") >= 2 {
			names = append(names, m[1])
		}
	}
	return names
}
