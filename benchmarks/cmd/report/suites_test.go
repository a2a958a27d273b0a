package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRenderSuite(t *testing.T) {
	vals := newSeries()
	for _, round := range []string{
		"BenchmarkKinds/rate-2  100  900 ns/op  250.0 cpu-ns/op  0 B/op  0 allocs/op\n" +
			"BenchmarkKinds/inflight-2  100  950 ns/op  345.0 cpu-ns/op  16 B/op  1 allocs/op\n",
		"BenchmarkKinds/rate-2  100  990 ns/op  260.0 cpu-ns/op  0 B/op  0 allocs/op\n" +
			"BenchmarkKinds/inflight-2  100  970 ns/op  335.0 cpu-ns/op  16 B/op  1 allocs/op\n",
		"BenchmarkKinds/rate-2  100  980 ns/op  240.0 cpu-ns/op  0 B/op  0 allocs/op\n" +
			"BenchmarkKinds/inflight-2  100  960 ns/op  355.0 cpu-ns/op  16 B/op  1 allocs/op\n",
	} {
		vals.parse("", strings.NewReader(round))
	}
	s := spec{
		title: "Kinds",
		runs:  []benchRun{{dir: "benchmarks", bench: "^BenchmarkKinds$", benchtime: "300ms"}},
		derived: []derivedFigure{
			{"Kinds/inflight over rate cpu-ns/op", "diff", "Kinds/inflight cpu-ns/op", "Kinds/rate cpu-ns/op"},
			{"Kinds/inflight ÷ rate cpu-ns/op", "ratio", "Kinds/inflight cpu-ns/op", "Kinds/rate cpu-ns/op"},
			{"Kinds/none over rate cpu-ns/op", "diff", "Kinds/none cpu-ns/op", "Kinds/rate cpu-ns/op"},
		},
	}
	m := machine{cpu: "Test CPU", cpus: 2, goVersion: "go1.26.8", osArch: "linux/amd64",
		date: time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC), load: "0.25 0.30 0.40", loadEnd: "1.00 0.50 0.45", rounds: 3}
	var out bytes.Buffer
	if err := renderSuite(&out, "kinds", s, m, vals); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"load average (1, 5, 15 min) 0.25 0.30 0.40 at the start, 1.00 0.50 0.45 at the end",
		"<!-- table: figures -->\n| name | value | smallest | largest |\n",
		"| `date` | 2026-12-06 08:00 UTC |  |  |\n",
		"| `load` | 0.25 0.30 0.40 |  |  |\n",
		// The median of three rounds, with the smallest and largest.
		"| `Kinds/rate cpu-ns/op` | 250 | 240 | 260 |\n",
		"| `Kinds/inflight allocs/op` | 1 | 1 | 1 |\n",
		// Derived from the medians.
		"| `Kinds/inflight over rate cpu-ns/op` | +95.0 |  |  |\n",
		"| `Kinds/inflight ÷ rate cpu-ns/op` | 1.38 |  |  |\n",
		"| `Kinds/none over rate cpu-ns/op` | not measured |  |  |\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
