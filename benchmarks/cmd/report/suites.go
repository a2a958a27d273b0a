package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// spec is a suite other than the comparison: benchmarks of any package
// of the repository, each run in every round, reported as the median,
// smallest and largest value of each figure over the rounds, and figures
// derived from them (a ratio or a difference of two, in the same round
// set).
type spec struct {
	title, about string
	runs         []benchRun
	derived      []derivedFigure
	// rounds, if set, replaces -count: a benchmark that alternates its
	// own rounds inside one run needs no more than one.
	rounds int
}

// benchRun is one go test -bench run of a round.
type benchRun struct {
	label     string   // before each figure's name ("prommetrics "), or none
	dir       string   // the package's directory from the repository root
	bench     string   // -test.bench
	benchtime string   // -test.benchtime
	args      []string // more flags for the test binary
}

// derivedFigure is a figure computed from two others' medians: a ÷ b
// (ratio) or a − b (diff).
type derivedFigure struct {
	name string
	op   string // "ratio" or "diff"
	a, b string
}

// suites are the reports other than the comparison, each quoted by the
// docs named in its about.
var suites = map[string]spec{
	"kinds": {
		title: "Admission kinds beside the plain rate limit",
		about: "`BenchmarkKinds` (benchmarks module): floodgate's middleware `ServeHTTP` for each admission kind over 100,000 populated client IPs; `wait/booked` is one client whose every request is booked ahead. Quoted by docs/performance.md.",
		runs:  []benchRun{{dir: "benchmarks", bench: "^BenchmarkKinds$", benchtime: "300ms"}},
		derived: []derivedFigure{
			{"Kinds/inflight over rate cpu-ns/op", "diff", "Kinds/inflight cpu-ns/op", "Kinds/rate cpu-ns/op"},
			{"Kinds/rate+inflight over rate cpu-ns/op", "diff", "Kinds/rate+inflight cpu-ns/op", "Kinds/rate cpu-ns/op"},
			{"Kinds/costafter over rate cpu-ns/op", "diff", "Kinds/costafter cpu-ns/op", "Kinds/rate cpu-ns/op"},
			{"Kinds/wait over rate cpu-ns/op", "diff", "Kinds/wait cpu-ns/op", "Kinds/rate cpu-ns/op"},
		},
	},
	"transport": {
		title: "What each transport's adapter adds to a call",
		about: "`BenchmarkTransport` (benchmarks module): `direct/` calls the adapter as its server does over 10,000 populated client keys; `e2e/` is a real client calling a real server over loopback TCP, in interleaved rounds, each case reporting its difference over the bare server (CPU time of client and server, allocations), under the steady and the draining quota; `e2e-saturated/` is the gRPC servers of `e2e/` called by 32 goroutines at once over each one's connection, so that both cores stay busy, in 64 rounds of batches of 1,000 calls, each case's batch between two of the bare server's and set against their mean, the cases in a random order (`base-cores`: the cores the process kept busy while the bare server ran). `BenchmarkUnaryOverhead` (contrib/grpclimit) alternates a bare, a limited and a limited server without quota metadata, 100 calls at a time. `BenchmarkUnaryServer` (contrib/connectlimit): connect-go's Connect and gRPC protocols. Quoted by docs/adapters.md and docs/performance.md.",
		runs: []benchRun{
			{dir: "benchmarks", bench: "^BenchmarkTransport$/^(direct|e2e)$", benchtime: "1s"},
			{dir: "benchmarks", bench: "^BenchmarkTransport$/^e2e-saturated$", benchtime: "64000x"},
			{label: "grpclimit ", dir: "contrib/grpclimit", bench: "^BenchmarkUnaryOverhead$", benchtime: "1x"},
			{label: "connectlimit ", dir: "contrib/connectlimit", bench: "^BenchmarkUnaryServer$", benchtime: "5000x"},
		},
	},
	"core": {
		title: "The core module's own benchmarks",
		about: "Benchmarks of the root module that the guides quote: the debt memory per key of the bound (`BenchmarkDebtMemory`), bytes per tracked key of each algorithm (`BenchmarkTokenBucketBytesPerKey`, `BenchmarkBytesPerKey`) and of a default-sized store from 1,000 keys to its bound (`BenchmarkDefaultStoreBytesPerKey`), a change of rate (`BenchmarkSetRate`, `BenchmarkDecisionsUnderSetRate`), `PlanLimiter`'s cached lookup (`BenchmarkPlanLimiter`), a route table's lookup (`BenchmarkRouteMatch`). ns/op is wall time.",
		runs: []benchRun{
			{dir: ".", bench: "^Benchmark(DebtMemory|TokenBucketBytesPerKey|BytesPerKey|DefaultStoreBytesPerKey)$", benchtime: "3x"},
			{dir: ".", bench: "^Benchmark(SetRate|DecisionsUnderSetRate|PlanLimiter|RouteMatch)$", benchtime: "300ms"},
		},
		derived: []derivedFigure{
			{"PlanLimiter/Cached ÷ Direct ns/op", "ratio", "PlanLimiter/Cached ns/op", "PlanLimiter/Direct ns/op"},
		},
	},
	"hooks": {
		title:  "What a metrics hook costs the middleware",
		about:  "`BenchmarkHookOverhead` in contrib/prommetrics and contrib/otelmetrics: 300 alternating rounds without and with the hook in one run on the middleware's fastest path (one key), the fastest round of each and the overhead between them, run once: the benchmark alternates its own rounds. Its 100,000-client case is left out: on a machine at a load average of 15 it ran for 19 minutes without finishing. `BenchmarkHook`: the hook alone. Quoted by docs/adapters.md.",
		rounds: 1,
		runs: []benchRun{
			{label: "prommetrics ", dir: "contrib/prommetrics", bench: "^BenchmarkHookOverhead$/^one-key$", benchtime: "1x"},
			{label: "otelmetrics ", dir: "contrib/otelmetrics", bench: "^BenchmarkHookOverhead$/^one-key$", benchtime: "1x"},
			{label: "prommetrics ", dir: "contrib/prommetrics", bench: "^BenchmarkHook$", benchtime: "300ms"},
			{label: "otelmetrics ", dir: "contrib/otelmetrics", bench: "^BenchmarkHook$", benchtime: "300ms"},
		},
	},
	"policyfile": {
		title: "The example server's policy file against its built-in limits",
		about: "`BenchmarkProbe` (examples/server): an allowed username probe, 4,096 clients in the stores, through `policies.json` and through the built-in limits. Quoted by docs/policy-file.md.",
		runs:  []benchRun{{dir: "examples/server", bench: "^BenchmarkProbe$", benchtime: "300ms"}},
		derived: []derivedFigure{
			{"Probe/file ÷ builtin ns/op", "ratio", "Probe/file ns/op", "Probe/builtin ns/op"},
			{"Probe/file over builtin allocs/op", "diff", "Probe/file allocs/op", "Probe/builtin allocs/op"},
		},
	},
	"curve": {
		title:  "In memory from a thousand keys to ten million: the cost curve",
		about:  "`BenchmarkScaleCurve` (benchmarks module): token bucket, every decision allowed, each library built for N keys where it takes a bound and populated with one decision per key, then 1,000,000 decisions over the N keys in a random order from one goroutine (serial) and from GOMAXPROCS goroutines (parallel; CPU time of all of them), heap retained per key, and GC CPU per forced cycle with only that library's state live; 3 rounds rotating the order of the libraries inside one run, medians reported, ratios of floodgate to the best peer. Ten million keys only with FLOODGATE_CURVE_10M=1, for floodgate, sethvargo and httprate. Quoted by docs/performance.md.",
		rounds: 1,
		runs:   []benchRun{{dir: "benchmarks", bench: "^BenchmarkScaleCurve$", benchtime: "1x", args: []string{"-test.timeout", "3h"}}},
	},
	"redis": {
		title: "Redis plain mode against redis_rate, in interleaved rounds",
		about: "`BenchmarkRedisRounds` (benchmarks module, a redis-server of its own on loopback) at 1 and 256 callers: redisstore's token bucket in plain mode on go-redis (`floodgate`) and on rueidis (`floodgate-rueidis`), and go-redis/redis_rate, each making 20,000 allowed decisions over 10,000 populated keys per round, in a rotating order, rounds interleaved inside each run; the benchmark reports each library's median decisions a second over its rounds, the server's CPU time and script time per decision (`INFO cpu`, `INFO commandstats`), this process's CPU time and allocations per decision, and floodgate's ratios to redis_rate of the same rounds (`/redis_rate`: decisions a second; `-server-saving`: redis_rate's server CPU per decision ÷ floodgate's). Quoted by README.md and docs/performance.md.",
		runs:  []benchRun{{dir: "benchmarks", bench: "^BenchmarkRedisRounds$/^callers=(1|256)$", benchtime: "7x"}},
	},
	"lease": {
		title: "Leased quota on Redis against redis_rate",
		about: "`BenchmarkRedisLeaseRounds` (benchmarks module, a redis-server of its own on loopback): redisstore's token bucket with leased quota on go-redis and rueidis, the plain mode, and redis_rate, in interleaved rounds inside each run; the benchmark reports its medians and ratios. Quoted by README.md and docs/performance.md.",
		runs:  []benchRun{{dir: "benchmarks", bench: "^BenchmarkRedisLeaseRounds$", benchtime: "7x"}},
	},
}

func suiteNames() []string {
	names := []string{"comparison", "testtimes"}
	for n := range suites {
		names = append(names, n)
	}
	sort.Strings(names[2:])
	return names
}

// runSuite runs suite s of the repository at root count times and writes
// its report.
func runSuite(root, name string, s spec, count int, rawPath string, out, progress io.Writer) error {
	if s.rounds > 0 {
		count = s.rounds
	}
	tmp, err := os.MkdirTemp("", "floodgate-bench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bins := make([]string, len(s.runs))
	built := map[string]string{}
	for i, r := range s.runs {
		if b, ok := built[r.dir]; ok {
			bins[i] = b
			continue
		}
		bins[i] = filepath.Join(tmp, fmt.Sprintf("bench%d.test", i))
		build := exec.Command("go", "test", "-c", "-o", bins[i], ".")
		build.Dir, build.Stdout, build.Stderr = filepath.Join(root, r.dir), progress, progress
		if err := build.Run(); err != nil {
			return fmt.Errorf("building the benchmarks of %s: %w", r.dir, err)
		}
		built[r.dir] = bins[i]
	}
	m := machineInfo()
	vals := newSeries()
	var all bytes.Buffer
	for round := 1; round <= count; round++ {
		for i, r := range s.runs {
			_, _ = fmt.Fprintf(progress, "round %d/%d: %s %s\n", round, count, r.dir, r.bench)
			args := append([]string{"-test.run", "^$", "-test.benchmem", "-test.bench", r.bench, "-test.benchtime", r.benchtime}, r.args...)
			cmd := exec.Command(bins[i], args...)
			cmd.Dir = filepath.Join(root, r.dir)
			var buf bytes.Buffer
			cmd.Stdout = io.MultiWriter(&buf, &all, progress)
			cmd.Stderr = io.MultiWriter(&all, progress)
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s %s, round %d: %w", r.dir, r.bench, round, err)
			}
			vals.parse(r.label, &buf)
		}
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, all.Bytes(), 0o644); err != nil {
			return err
		}
	}
	m.rounds, m.loadEnd = count, loadAverage()
	return renderSuite(out, name, s, m, vals)
}

// series holds every value of every figure, by name ("Kinds/rate
// cpu-ns/op"), in the order first seen.
type series struct {
	names  []string
	values map[string][]float64
}

func newSeries() *series { return &series{values: map[string][]float64{}} }

// anyBenchLine matches a go test -bench result line of any benchmark.
var anyBenchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

func (s *series) parse(label string, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := anyBenchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		for j := 0; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				continue
			}
			s.add(label+m[1]+" "+f[j+1], v)
		}
	}
}

func (s *series) add(name string, v float64) {
	if _, ok := s.values[name]; !ok {
		s.names = append(s.names, name)
	}
	s.values[name] = append(s.values[name], v)
}

// stats returns the median, smallest and largest value of name.
func (s *series) stats(name string) (med, lo, hi float64, ok bool) {
	vs := append([]float64(nil), s.values[name]...)
	if len(vs) == 0 {
		return 0, 0, 0, false
	}
	sort.Float64s(vs)
	n := len(vs)
	med = vs[n/2]
	if n%2 == 0 {
		med = (vs[n/2-1] + vs[n/2]) / 2
	}
	return med, vs[0], vs[n-1], true
}

// unitOf returns the unit of a figure's name: its last word.
func unitOf(name string) string { return name[strings.LastIndexByte(name, ' ')+1:] }

// renderSuite writes a suite's report: where and when, then every figure
// with its median, smallest and largest value over the rounds.
func renderSuite(w io.Writer, name string, s spec, m machine, vals *series) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	f := newFigures("smallest", "largest")
	header(p, f, name, s.title, s.about, m)
	p("Each figure is the median of %d rounds, with the smallest and largest beside it; ", m.rounds)
	p("the runs: ")
	for i, r := range s.runs {
		if i > 0 {
			p("; ")
		}
		p("`go test -run '^$' -bench '%s' -benchtime %s -benchmem` in %s", r.bench, r.benchtime, r.dir)
	}
	p(". A figure whose smallest and largest differ by much moved with the machine's load.\n")
	for _, n := range vals.names {
		med, lo, hi, _ := vals.stats(n)
		u := unitOf(n)
		f.add(n, num(med, u), num(lo, u), num(hi, u))
	}
	for _, d := range s.derived {
		a, _, _, aok := vals.stats(d.a)
		b, _, _, bok := vals.stats(d.b)
		if !aok || !bok {
			f.add(d.name, "not measured")
			continue
		}
		switch d.op {
		case "ratio":
			f.add(d.name, ratio(a, b, true))
		default:
			v := a - b
			sign := "+"
			if v < 0 {
				sign = "−"
			}
			f.add(d.name, sign+num(math.Abs(v), unitOf(d.name)))
		}
	}
	f.write(p)
	return err
}
