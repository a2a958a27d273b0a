package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// stepTime is one step of scripts/test.sh as TEST_TIMES records it.
type stepTime struct {
	name             string
	wallMS, cpuMS    int
	budgetS          int
	besideOtherSteps bool
}

// timesRun is what scripts/test-times.sh records of one measured run.
type timesRun struct {
	steps []stepTime
	meta  map[string]string // "# key value" lines
}

// readTimes reads the file scripts/test-times.sh writes: test.sh's
// TEST_TIMES lines (wall ms, CPU ms, budget s, step) and "# key value"
// lines.
func readTimes(path string) (timesRun, error) {
	run := timesRun{meta: map[string]string{}}
	f, err := os.Open(path)
	if err != nil {
		return run, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			k, v, _ := strings.Cut(rest, " ")
			run.meta[k] = v
			continue
		}
		fields := strings.SplitN(line, "\t", 4)
		if len(fields) != 4 {
			continue
		}
		var st stepTime
		var errs [3]error
		st.wallMS, errs[0] = strconv.Atoi(fields[0])
		st.cpuMS, errs[1] = strconv.Atoi(fields[1])
		st.budgetS, errs[2] = strconv.Atoi(fields[2])
		for _, e := range errs {
			if e != nil {
				return run, fmt.Errorf("%s: %q: %w", path, line, e)
			}
		}
		st.name = fields[3]
		st.besideOtherSteps = strings.HasPrefix(st.name, "release check")
		run.steps = append(run.steps, st)
	}
	return run, sc.Err()
}

// seconds formats ms as whole seconds.
func seconds(ms int) string { return strconv.Itoa((ms + 500) / 1000) }

// minSec formats ms as "8 min 1 s".
func minSec(ms int) string {
	s := (ms + 500) / 1000
	if s < 60 {
		return fmt.Sprintf("%d s", s)
	}
	return fmt.Sprintf("%d min %d s", s/60, s%60)
}

// renderTimes writes the testtimes report.
func renderTimes(w io.Writer, run timesRun) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	m := machineInfo()
	if d, perr := time.Parse(time.RFC3339, run.meta["date"]); perr == nil {
		m.date = d.UTC()
	}
	m.load, m.loadEnd = run.meta["load_start"], run.meta["load_end"]
	m.rounds = 1
	f := newFigures()
	header(p, f, "testtimes", "How long the test commands take",
		"`scripts/test-times.sh` on a fresh clone of commit "+run.meta["commit"]+" with empty module and build caches: "+
			"`go test ./...` of the core module (fresh, then warm), then `scripts/test.sh` with `FLOODGATE_REQUIRE_SERVERS=1`, as CI runs it "+
			"(TEST_TIMES: each step's wall time, CPU time of every process it ran, and its budget). Quoted by README.md and docs/testing.md.", m)
	for _, k := range []string{"gotest_fresh", "gotest_warm"} {
		v := strings.Fields(run.meta[k])
		if len(v) != 2 {
			continue
		}
		wall, _ := strconv.Atoi(v[0])
		cpu, _ := strconv.Atoi(v[1])
		f.add(k+" wall s", seconds(wall))
		f.add(k+" cpu s", seconds(cpu))
	}
	p("<!-- table: steps -->\n")
	p("| step | wall (s) | CPU (s) | budget (s) |\n|---|---|---|---|\n")
	total, totalCPU, budget := 0, 0, 0
	for _, st := range run.steps {
		note := ""
		if st.besideOtherSteps {
			note = " (beside the tests)"
		} else {
			total += st.wallMS
			budget += st.budgetS
		}
		totalCPU += st.cpuMS
		p("| %s%s | %s | %s | %d |\n", st.name, note, seconds(st.wallMS), seconds(st.cpuMS), st.budgetS)
		f.add(st.name+" wall s", seconds(st.wallMS))
		f.add(st.name+" cpu s", seconds(st.cpuMS))
		f.add(st.name+" budget s", strconv.Itoa(st.budgetS))
	}
	if w, ok := run.meta["testsh_wall"]; ok {
		if ms, perr := strconv.Atoi(w); perr == nil {
			total = ms
		}
	}
	p("| total | %s (%s) | %s | %d |\n", seconds(total), minSec(total), seconds(totalCPU), budget)
	f.add("total wall s", seconds(total))
	f.add("total wall", minSec(total))
	f.add("total cpu s", seconds(totalCPU))
	f.add("total budget s", strconv.Itoa(budget))
	f.write(p)
	return err
}
