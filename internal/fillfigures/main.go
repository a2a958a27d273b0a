// Command fillfigures writes each figure the docs quote from a benchmark
// report where the doc holds a "?" before the figure's marker:
//
//	a hot-key decision takes ?<!-- figure: comparison Decision/hot/floodgate cpu-ns/op --> CPU ns
//
// becomes the report's value, and writes each table a doc quotes whole
// (<!-- report-table: REPORT TABLE -->) as the report has it now. Write
// the marker, run
//
//	go run ./internal/fillfigures README.md docs/*.md
//
// from the repository root, and read the sentence again: the figure may
// no longer say what the words around it do. TestDocFigures checks every
// quotation; this only saves the copying.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/floodgate-go/floodgate/internal/doccheck"
)

var (
	placeholder = regexp.MustCompile(`\?<!-- figure: (\S+) (.+?) -->`)
	marker      = regexp.MustCompile(`<!-- figure: (\S+) (.+?) -->`)
)

func main() {
	was := flag.String("was", "", "also update the figures that quote a report as it was at this git revision")
	flag.Parse()
	reports := map[string]doccheck.Report{}
	failed := false
	for _, md := range flag.Args() {
		data, err := os.ReadFile(md)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		filled := 0
		report := func(name string) (doccheck.Report, bool) {
			r, ok := reports[name]
			if !ok {
				r, err = doccheck.ReadReport(filepath.Join("benchmarks", "reports", name+".md"))
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s: %v\n", md, err)
					failed = true
					return r, false
				}
				reports[name] = r
			}
			return r, true
		}
		text := tables(string(data), report, &filled)
		if *was != "" {
			text = update(text, *was, report, &filled)
		}
		out := placeholder.ReplaceAllStringFunc(text, func(s string) string {
			m := placeholder.FindStringSubmatch(s)
			r, ok := report(m[1])
			if !ok {
				return s
			}
			v, ok := r.Figures[m[2]]
			if !ok {
				fmt.Fprintf(os.Stderr, "%s: report %s has no figure %q\n", md, m[1], m[2])
				failed = true
				return s
			}
			filled++
			return v + strings.TrimPrefix(s, "?")
		})
		if filled > 0 {
			if err := os.WriteFile(md, []byte(out), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Printf("%s: %d figure(s) filled\n", md, filled)
		}
	}
	if failed {
		os.Exit(1)
	}
}

var tableMarker = regexp.MustCompile(`^<!-- report-table: (\S+) (\S+) -->$`)

// tables writes, after each report-table marker of text, the report's
// table in place of the table there (if any).
func tables(text string, report func(string) (doccheck.Report, bool), filled *int) string {
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		m := tableMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		r, ok := report(m[1])
		if !ok {
			continue
		}
		rows, ok := r.Tables[m[2]]
		if !ok {
			fmt.Fprintf(os.Stderr, "report %s has no table %q\n", m[1], m[2])
			continue
		}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|") {
			i++
		}
		out = append(out, rows...)
		*filled++
	}
	return strings.Join(out, "\n")
}

// update replaces, before each figure marker of text, the value the
// report had at git revision rev with the value it has now.
func update(text, rev string, report func(string) (doccheck.Report, bool), filled *int) string {
	old := map[string]doccheck.Report{}
	var b strings.Builder
	last := 0
	for _, loc := range marker.FindAllStringSubmatchIndex(text, -1) {
		name, fig := text[loc[2]:loc[3]], text[loc[4]:loc[5]]
		r, ok := old[name]
		if !ok {
			r = readAt(rev, name)
			old[name] = r
		}
		now, ok := report(name)
		before := text[last:loc[0]]
		if was, okWas := r.Figures[fig]; ok && okWas && strings.HasSuffix(before, was) {
			if v, okNow := now.Figures[fig]; okNow && v != was {
				before = strings.TrimSuffix(before, was) + v
				*filled++
			}
		}
		b.WriteString(before)
		b.WriteString(text[loc[0]:loc[1]])
		last = loc[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// readAt reads the report name as it was at git revision rev.
func readAt(rev, name string) doccheck.Report {
	out, err := exec.Command("git", "show", rev+":benchmarks/reports/"+name+".md").Output()
	if err != nil {
		return doccheck.Report{}
	}
	f, err := os.CreateTemp("", "report")
	if err != nil {
		return doccheck.Report{}
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, _ = f.Write(out)
	_ = f.Close()
	r, _ := doccheck.ReadReport(f.Name())
	return r
}
