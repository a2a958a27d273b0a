// Command report runs the whole floodgate comparison and prints it as
// Markdown: every figure of every library, and floodgate's ratio to the
// best peer with the target it is held to, and its ratio to the floor
// of any in-memory decision (BenchmarkFloor).
//
// Run it from the benchmarks module:
//
//	cd benchmarks && go run ./cmd/report
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
	benchtime := flag.String("benchtime", "200ms", "go test -benchtime of the timed cases")
	bench := flag.String("bench", "^Benchmark(Decision|Middleware|Floor|Memory|Redis)$", "go test -bench pattern")
	raw := flag.String("raw", "", "also write the raw go test output to this file")
	flag.Parse()
	if err := run(*count, *benchtime, *bench, *raw, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(count int, benchtime, bench, rawPath string, out, progress io.Writer) error {
	if count < 1 {
		return fmt.Errorf("-count %d: need at least one round", count)
	}
	dir, err := goList("-f", "{{.Dir}}", "github.com/floodgate-go/floodgate/benchmarks")
	if err != nil {
		return err
	}
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
	load      string
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
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.load = strings.Join(f[:3], " ")
		}
	}
	return m
}
