// Command report runs the whole floodgate comparison and prints it as
// Markdown: every figure of every library, and floodgate's ratio to the
// best peer with the target it is held to, and its ratio to the floor
// of any in-memory decision (BenchmarkFloor).
//
// Run it from the benchmarks module:
//
//	cd benchmarks && go run ./cmd/report                  # reports/comparison.md
//	cd benchmarks && go run ./cmd/report -suite kinds     # reports/kinds.md
//
// Each suite writes its report to reports/SUITE.md: the machine, the load
// average at the start and the end, the date, the tables, and every figure
// by name, which README.md and docs/ quote (internal/doccheck checks the
// quotations against the latest report). The suites other than the
// comparison run benchmarks of any module of the repository (suites.go).
//
// It builds the benchmark binary once, then runs every case in rounds
// (-count), so that all libraries are measured close together in time
// and a burst of load from elsewhere hits them alike; each figure is the
// median over the rounds. The Redis cases start a loopback redis-server of
// their own, or are skipped with a message when there is none. -raw keeps
// the go test output, for benchstat.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	count := flag.Int("count", 5, "rounds; each figure is the median over them")
	benchtime := flag.String("benchtime", "200ms", "go test -benchtime of the timed cases (comparison suite)")
	bench := flag.String("bench", "^Benchmark(Decision|Middleware|Floor|Memory|Redis)$", "go test -bench pattern (comparison suite)")
	raw := flag.String("raw", "", "also write the raw go test output to this file")
	suite := flag.String("suite", "comparison", "the suite to run: "+strings.Join(suiteNames(), ", "))
	outPath := flag.String("o", "", "the report file (default reports/SUITE.md in the benchmarks module; - for standard output)")
	times := flag.String("times", "", "testtimes suite: the file scripts/test-times.sh recorded")
	flag.Parse()
	if err := report(*suite, *outPath, *count, *benchtime, *bench, *raw, *times); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// report runs suite and writes its report to outPath.
func report(suite, outPath string, count int, benchtime, bench, raw, times string) error {
	if count < 1 {
		return fmt.Errorf("-count %d: need at least one round", count)
	}
	dir, err := goList("-f", "{{.Dir}}", "github.com/floodgate-go/floodgate/benchmarks")
	if err != nil {
		return err
	}
	if outPath == "" {
		outPath = filepath.Join(dir, "reports", suite+".md")
	}
	var buf bytes.Buffer
	switch suite {
	case "comparison":
		err = run(dir, count, benchtime, bench, raw, &buf, os.Stderr)
	case "testtimes":
		var t timesRun
		if t, err = readTimes(times); err == nil {
			err = renderTimes(&buf, t)
		}
	default:
		s, ok := suites[suite]
		if !ok {
			return fmt.Errorf("-suite %q: want one of %s", suite, strings.Join(suiteNames(), ", "))
		}
		err = runSuite(filepath.Dir(dir), suite, s, count, raw, &buf, os.Stderr)
	}
	if err != nil {
		return err
	}
	if outPath == "-" {
		_, err = os.Stdout.Write(buf.Bytes())
		return err
	}
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(outPath, buf.Bytes(), 0o644); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(os.Stderr, "wrote %s\n", outPath)
	return nil
}

// run runs the comparison suite: every library on the same cases, from
// the benchmarks module in dir.
func run(dir string, count int, benchtime, bench, rawPath string, out, progress io.Writer) error {
	tmp, err := os.MkdirTemp("", "floodgate-bench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, "benchmarks.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir, build.Stdout, build.Stderr = dir, progress, progress
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the benchmarks: %w", err)
	}

	m := machineInfo()
	var all bytes.Buffer
	res := newResults()
	for round := 1; round <= count; round++ {
		// The memory case measures one populated store per iteration: one
		// iteration per round is the figure, more would only take longer.
		passes := [][]string{
			{"-test.bench", timedPattern(bench), "-test.benchtime", benchtime},
			{"-test.bench", memoryPattern(bench), "-test.benchtime", "1x"},
		}
		for _, pass := range passes {
			if pass[1] == "" {
				continue
			}
			_, _ = fmt.Fprintf(progress, "round %d/%d: %s\n", round, count, pass[1])
			args := append([]string{"-test.run", "^$", "-test.benchmem"}, pass...)
			cmd := exec.Command(bin, args...)
			cmd.Dir = dir
			var buf bytes.Buffer
			cmd.Stdout = io.MultiWriter(&buf, &all, progress)
			cmd.Stderr = io.MultiWriter(&all, progress)
			runErr := cmd.Run()
			res.parse(&buf)
			if runErr != nil {
				// A failed case (a library that denied in an "allowed"
				// case, say) is reported as missing; the others stand.
				_, _ = fmt.Fprintf(progress, "round %d: %v (failed cases are left out of the table)\n", round, runErr)
				res.failures = append(res.failures, failedNames(buf.String())...)
			}
		}
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, all.Bytes(), 0o644); err != nil {
			return err
		}
	}
	m.rounds, m.benchtime = count, benchtime
	m.loadEnd = loadAverage()
	return render(out, m, res)
}

// timedPattern and memoryPattern split the -bench pattern into the cases
// timed with -benchtime and the memory case, run once per round. Only the
// default pattern is split; any other runs as given in the timed pass.
func timedPattern(p string) string {
	if p == "^Benchmark(Decision|Middleware|Floor|Memory|Redis)$" {
		return "^Benchmark(Decision|Middleware|Floor|Redis)$"
	}
	return p
}

func memoryPattern(p string) string {
	if p == "^Benchmark(Decision|Middleware|Floor|Memory|Redis)$" {
		return "^BenchmarkMemory$"
	}
	return ""
}

func goList(args ...string) (string, error) {
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("go list: %w (run from the benchmarks module)", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// machine describes where and when the figures were taken.
type machine struct {
	cpu       string
	cpus      int
	goVersion string
	osArch    string
	date      time.Time
	load      string // at the start
	loadEnd   string
	rounds    int
	benchtime string
}

func machineInfo() machine {
	m := machine{
		cpu:    "unknown CPU",
		cpus:   runtime.NumCPU(),
		osArch: runtime.GOOS + "/" + runtime.GOARCH,
		date:   time.Now().UTC(),
	}
	if v, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(v))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	m.load = loadAverage()
	return m
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "unknown".
func loadAverage() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			return strings.Join(f[:3], " ")
		}
	}
	return "unknown"
}
