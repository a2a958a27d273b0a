package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkDecision/hot/floodgate-2   	 1000	  50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkDecision/hot/sethvargo-2   	 1000	 100.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkDecision/hot/floodgate-2   	 1000	  70.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkDecision/hot/sethvargo-2   	 1000	 120.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkDecision/hot/floodgate-2   	 1000	  60.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkDecision/hot/sethvargo-2   	 1000	 110.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkDecision/hot/baseline-2    	 1000	  40.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkFloor/time.Since-2        	 1000	  20.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkFloor/maphash-2           	 1000	   5.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkFloor/mutex-2             	 1000	   5.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkMemory/100k/floodgate-2    	    1	 9 ns/op	 120.0 B/key	 262144 max-keys	 5 B/op	 3 allocs/op
BenchmarkMemory/100k/sethvargo-2    	    1	 9 ns/op	 100.0 B/key	      0 max-keys	 5 B/op	 3 allocs/op
BenchmarkMemory/100k/throttled-2    	    1	 9 ns/op	 150.0 B/key	 262144 max-keys	 5 B/op	 3 allocs/op
BenchmarkRedis/callers=256/floodgate-2          	 100	 9 ns/op	 900 cpu-ns/op	 20000 decisions/s	 5 B/op	 3 allocs/op
BenchmarkRedis/callers=256/floodgate-rueidis-2  	 100	 9 ns/op	 40000 decisions/s	 5 B/op	 3 allocs/op
BenchmarkRedis/callers=256/redis_rate-2         	 100	 9 ns/op	 1000 cpu-ns/op	 16000 decisions/s	 5 B/op	 3 allocs/op
--- FAIL: BenchmarkMiddleware/allowed/ulule-2
PASS
`

func TestParseAndRatios(t *testing.T) {
	r := newResults()
	r.parse(strings.NewReader(sample))

	tests := []struct {
		c, lib, unit string
		want         float64
	}{
		{"Decision/hot", "floodgate", "ns/op", 60},
		{"Decision/hot", "sethvargo", "ns/op", 110},
		{"Memory/100k", "floodgate", "B/key", 120},
		{"Memory/100k", "throttled", "max-keys", 262144},
	}
	for _, tt := range tests {
		got, ok := r.median(tt.c, tt.lib, tt.unit)
		if !ok || got != tt.want {
			t.Errorf("median(%s, %s, %s) = %v, %v; want %v", tt.c, tt.lib, tt.unit, got, ok, tt.want)
		}
	}

	// The memory case compares with the best bounded peer only.
	if name, v, ok := r.bestPeer("Memory/100k", metricsOf("Memory/100k")[0]); !ok || name != "throttled" || v != 150 {
		t.Errorf("best bounded peer = %s %v %v, want throttled 150", name, v, ok)
	}
	if got := failedNames(sample); len(got) != 1 || got[0] != "Middleware/allowed/ulule" {
		t.Errorf("failedNames = %q, want [Middleware/allowed/ulule]", got)
	}

	var out bytes.Buffer
	if err := render(&out, machine{rounds: 3}, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// Judged against the best library, not the faster hand-made
		// baseline; the floor is clock + hash + lock, 30 ns.
		"| Decision/hot | ns/op | 60.0 | baseline 40.0 | 1.50 | sethvargo 110 | 0.55 | 0 | ≤ 0.75, 0 allocs | yes | 30.0 | 2.00 |",
		// Memory is held to an absolute bound.
		"| Memory/100k | B/key | 120 | throttled 150 | 0.80 | throttled 150 | 0.80 | — | ≤ 100 B/key, bounded | **no** | — | — |",
		"| Memory/100k | sethvargo (unbounded) | 100 B/key |",
		// Variants of floodgate are judged, not taken as peers; decisions/s
		// is higher-is-better.
		"| Redis/callers=256 | decisions/s | 20000 | redis_rate 16000 | 1.25 | redis_rate 16000 | 1.25 | 3 | ≥ 2.0 | **no** | — | — |",
		// The throughput target says nothing of CPU time.
		"| Redis/callers=256 | cpu-ns/op | 900 | redis_rate 1000 | 0.90 | redis_rate 1000 | 0.90 | 3 |  |  | — | — |",
		// Each client has its own target.
		"| Redis/callers=256 (floodgate-rueidis) | decisions/s | 40000 | redis_rate 16000 | 2.50 | redis_rate 16000 | 2.50 | 3 | ≥ 2.5 | yes | — | — |",
		// The table docs/performance.md quotes, on CPU time where measured.
		"<!-- table: docs -->\n| case (CPU ns/op) |",
		"| bytes per tracked key, 100k keys | 120 B, bounded | throttled 150 B (bounded) | 0.80 | ≤ 100 B/key, bounded missed |  |  | — |",
		"| Redis, rueidis, 256 callers (decisions/s) | 40000 | redis_rate 16000 | 2.50 | ≥ 2.5 met |  |  | 3 |",
		// Every figure by name, as the docs quote them.
		"| `Decision/hot/floodgate ns/op` | 60.0 |",
		"| `Decision/hot/floodgate ÷ best library ns/op` | 0.55 |",
		"| `Decision/hot best library ns/op` | sethvargo |",
		"| `Decision/hot/floodgate ÷ floor ns/op` | 2.00 |",
		"| `Memory/100k/floodgate met B/key` | no |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestNumRatioPrecision: a ratio read against a target near it keeps two
// decimals, so that a miss by a few hundredths is not printed as met.
func TestNumRatioPrecision(t *testing.T) {
	for _, c := range []struct {
		v          float64
		unit, want string
	}{
		{0.9568, "floodgate/redis_rate", "0.96"},
		{2.979, "floodgate-rueidis/redis_rate", "2.98"},
		{16.04, "floodgate-lease/redis_rate", "16.0"},
		{0.7451, "serial-cpu/best", "0.75"},
		{0.9568, "floodgate-server-saving", "1.0"},
	} {
		if got := num(c.v, c.unit); got != c.want {
			t.Errorf("num(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}
