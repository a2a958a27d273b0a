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
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/floodgate-go/floodgate/internal/doccheck"
)

var placeholder = regexp.MustCompile(`\?<!-- figure: (\S+) (.+?) -->`)

func main() {
	reports := map[string]doccheck.Report{}
	failed := false
	for _, md := range os.Args[1:] {
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
