package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// A figure in the docs is a quotation of a run, the way a snippet is a
// quotation of code. Three markers say where each comes from:
//
//	44.9<!-- figure: comparison Decision/hot/floodgate cpu-ns/op -->
//
// quotes the figure NAME of the benchmark report REPORT
// (benchmarks/reports/REPORT.md, written by benchmarks/cmd/report): the
// text right before the marker must be the report's value, character for
// character (bold markers aside).
//
//	<!-- report-table: comparison docs -->
//	| case | ... |
//
// quotes a whole table of a report (the one after its
// "<!-- table: NAME -->" line): the table that follows the marker must be
// that table, line for line.
//
//	over-spend is at most the in-flight costs<!-- bound: . TestCostAfterOverSpendBoundedByInFlight -->
//
// says which tests check a bound the docs promise: each Test function
// named must exist in a _test.go file of DIR (from the repository root).

var (
	figureMarker = regexp.MustCompile(`<!-- figure: (\S+) (.+?) -->`)
	tableMarker  = regexp.MustCompile(`^<!-- report-table: (\S+) (\S+) -->$`)
	boundMarker  = regexp.MustCompile(`<!-- bound: (\S+)((?: Test\w+)+) -->`)
	// reportTable marks a table in a report.
	reportTable = regexp.MustCompile(`^<!-- table: (\S+) -->$`)
)

// Report is a benchmark report: its figures by name and its tables.
type Report struct {
	Figures map[string]string // from its "figures" table
	Tables  map[string][]string
}

// ReadReport reads the report at path. Its "figures" table gives each
// figure's value in the second column; a further column COL (smallest,
// largest) gives the figure "NAME (COL)".
func ReadReport(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{}, err
	}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	r := Report{Figures: map[string]string{}, Tables: map[string][]string{}}
	for i, l := range lines {
		m := reportTable.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		r.Tables[m[1]] = tableAfter(lines, i+1)
	}
	rows := r.Tables["figures"]
	if len(rows) < 2 {
		return r, nil
	}
	header := cells(rows[0])
	for _, row := range rows[2:] {
		c := cells(row)
		if len(c) < 2 {
			continue
		}
		name := strings.Trim(c[0], "`")
		r.Figures[name] = c[1]
		for j := 2; j < len(c) && j < len(header); j++ {
			if c[j] != "" {
				r.Figures[name+" ("+header[j]+")"] = c[j]
			}
		}
	}
	return r, nil
}

// tableAfter returns the table starting at or after line i (a line of
// prose may stand between a table marker and its table).
func tableAfter(lines []string, i int) []string {
	for i < len(lines) && !strings.HasPrefix(lines[i], "|") && strings.TrimSpace(lines[i]) != "" {
		i++
	}
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	end := i
	for end < len(lines) && strings.HasPrefix(lines[end], "|") {
		end++
	}
	return lines[i:end]
}

// cells splits a table row into its trimmed cells.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	c := strings.Split(row, "|")
	for i := range c {
		c[i] = strings.TrimSpace(c[i])
	}
	return c
}

// Figures checks the figure and report-table markers of the Markdown file
// md (a path from root, the repository root) against the reports in
// reportDir (a path from root): each quotes its report's latest value.
// missingOK reports whether a report may be absent (a nested module's
// file, absent from a module zip). It returns how many quotations it
// checked.
func Figures(t testing.TB, root, md, reportDir string, missingOK func(report string) bool) int {
	t.Helper()
	reports := map[string]*Report{}
	load := func(name string, line int) *Report {
		if r, ok := reports[name]; ok {
			return r
		}
		path := filepath.Join(root, reportDir, name+".md")
		r, err := ReadReport(path)
		if err != nil {
			reports[name] = nil
			if !(os.IsNotExist(err) && missingOK(name)) {
				t.Errorf("%s:%d: report %s: %v", md, line, name, err)
			}
			return nil
		}
		reports[name] = &r
		return &r
	}
	lines := Prose(Lines(t, filepath.Join(root, md)))
	checked := 0
	for i, l := range lines {
		if m := tableMarker.FindStringSubmatch(l); m != nil {
			r := load(m[1], i+1)
			if r == nil {
				continue
			}
			checked++
			want, ok := r.Tables[m[2]]
			if !ok {
				t.Errorf("%s:%d: report %s has no table %q", md, i+1, m[1], m[2])
				continue
			}
			got := tableAfter(lines, i+1)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s:%d quotes table %q of report %s, but it differs; the report has:\n%s", md, i+1, m[2], m[1], strings.Join(want, "\n"))
			}
			continue
		}
		for _, loc := range figureMarker.FindAllStringSubmatchIndex(l, -1) {
			report, name := l[loc[2]:loc[3]], l[loc[4]:loc[5]]
			r := load(report, i+1)
			if r == nil {
				continue
			}
			checked++
			want, ok := r.Figures[name]
			if !ok {
				t.Errorf("%s:%d: report %s has no figure %q", md, i+1, report, name)
				continue
			}
			if !quotes(l[:loc[0]], want) {
				t.Errorf("%s:%d: the figure before <!-- figure: %s %s --> is not the report's %q (%s, %s)",
					md, i+1, report, name, want, r.Figures["date"], "load average "+r.Figures["load"])
			}
		}
	}
	return checked
}

// quotes reports whether text ends with value, as a whole figure: bold or
// italic markers after it are let be, and the character before it is no
// digit, letter or decimal point (so 144.9 does not quote 44.9).
func quotes(text, value string) bool {
	text = strings.TrimRight(text, "*_")
	if !strings.HasSuffix(text, value) {
		return false
	}
	before := strings.TrimSuffix(text, value)
	if before == "" {
		return true
	}
	r := []rune(before)
	last := r[len(r)-1]
	return !(unicode.IsDigit(last) || unicode.IsLetter(last) || last == '.' || last == ',')
}

// Bounds checks the bound markers of the Markdown file md (a path from
// root): every test each names exists in a _test.go file of its
// directory. dirOK reports whether a missing directory may be skipped (a
// nested module's, absent from a module zip). It returns how many
// markers it checked.
func Bounds(t testing.TB, root, md string, dirOK func(dir string) bool) int {
	t.Helper()
	tests := map[string]map[string]bool{}
	checked := 0
	for i, l := range Prose(Lines(t, filepath.Join(root, md))) {
		for _, m := range boundMarker.FindAllStringSubmatch(l, -1) {
			dir := m[1]
			have, ok := tests[dir]
			if !ok {
				var err error
				have, err = testFuncs(filepath.Join(root, filepath.FromSlash(dir)))
				if err != nil {
					if !(os.IsNotExist(err) && dirOK(dir)) {
						t.Errorf("%s:%d: bound marker: %v", md, i+1, err)
					}
					have = nil
				}
				tests[dir] = have
			}
			if have == nil {
				continue
			}
			checked++
			for _, name := range strings.Fields(m[2]) {
				if !have[name] {
					t.Errorf("%s:%d: the bound names %s, which no _test.go file of %s declares", md, i+1, name, dir)
				}
			}
		}
	}
	return checked
}

// testDecl matches the declaration of a test function.
var testDecl = regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)

// testFuncs returns the test functions declared in dir's _test.go files.
func testFuncs(dir string) (map[string]bool, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range testDecl.FindAllStringSubmatch(string(data), -1) {
			have[m[1]] = true
		}
	}
	return have, nil
}

// measurement matches a figure that can only come from a run: a number
// with a unit of time below the millisecond, of memory or allocations, a
// multiple or a share.
var measurement = regexp.MustCompile(`(?:^|[^\w.^/,-])(\d[\d,]*(?:\.\d+)?(?:[–-]\d[\d,]*(?:\.\d+)?)?)(\*\*)?(\s?)(ns\b|µs\b|allocs?\b|allocations?\b|B\b|KiB\b|bytes\b|×|%|decisions\b|CPU ns\b)`)

// Unquoted returns the measurements in the prose of the Markdown file md
// (a path from root) that no figure or bound marker follows: each as the
// figure with its unit ("47 B"), with its line number. Code blocks, code
// spans and quoted report tables are left out.
func Unquoted(t testing.TB, root, md string) []Figure {
	t.Helper()
	lines := Prose(Lines(t, filepath.Join(root, md)))
	var out []Figure
	inTable := false
	for i, l := range lines {
		if tableMarker.MatchString(l) {
			inTable = true
			continue
		}
		if inTable {
			if strings.HasPrefix(l, "|") {
				continue
			}
			inTable = false
		}
		blank := func(s string) string { return strings.Repeat(" ", len(s)) }
		masked := comment.ReplaceAllStringFunc(codeSpan.ReplaceAllStringFunc(l, blank), blank)
		for _, loc := range measurement.FindAllStringSubmatchIndex(masked, -1) {
			after := l[loc[3]:]
			after = strings.TrimLeft(after, "*_")
			if strings.HasPrefix(after, "<!-- figure:") || strings.HasPrefix(after, "<!-- bound:") {
				continue
			}
			// A marker after the unit ("8 ×<!-- bound: … -->" reads
			// better for a multiple) counts as well.
			rest := strings.TrimLeft(l[loc[9]:], "*_")
			if strings.HasPrefix(rest, "<!-- figure:") || strings.HasPrefix(rest, "<!-- bound:") {
				continue
			}
			out = append(out, Figure{Line: i + 1, Text: strings.TrimSpace(l[loc[2]:loc[3]]) + l[loc[6]:loc[7]] + l[loc[8]:loc[9]]})
		}
	}
	return out
}

// comment matches an HTML comment: a marker's names are no figures.
var comment = regexp.MustCompile(`<!--.*?-->`)

// Figure is a measurement found in a Markdown file.
type Figure struct {
	Line int
	Text string // the figure and its unit, as written: "47 B", "0.69 ×"
}
