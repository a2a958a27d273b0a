package main

import (
	"fmt"
	"strings"
)

// figures collects every figure a report prints, by name, in the order
// added, so that the report can end with the list the docs quote from
// (<!-- figure: REPORT NAME --> in README.md and docs/, checked by
// internal/doccheck against this list).
type figures struct {
	names  []string
	values map[string][]string // the value, then further columns (min, max)
	extra  []string            // the further columns' headers
}

func newFigures(extra ...string) *figures {
	return &figures{values: map[string][]string{}, extra: extra}
}

// add records name's value, and the further columns if any. A name added
// twice keeps its first value: a report says one thing of each figure.
func (f *figures) add(name string, value string, extra ...string) {
	if _, ok := f.values[name]; ok {
		return
	}
	f.names = append(f.names, name)
	f.values[name] = append([]string{value}, extra...)
}

// write prints the "Figures by name" section: one table row per figure.
func (f *figures) write(p func(string, ...any)) {
	p("\n## Figures by name\n\n")
	p("The docs quote these by name, the figure followed by `<!-- figure: REPORT NAME -->`;\n")
	p("`go test -run TestDocFigures .` in the root module checks each quotation against this list.\n\n")
	p("<!-- table: figures -->\n")
	p("| name | value%s |\n", joinCells(f.extra))
	p("|---|---%s|\n", strings.Repeat("|---", len(f.extra)))
	for _, n := range f.names {
		v := f.values[n]
		for len(v) < 1+len(f.extra) {
			v = append(v, "")
		}
		p("| `%s` | %s |\n", n, strings.Join(v, " | "))
	}
}

func joinCells(cells []string) string {
	if len(cells) == 0 {
		return ""
	}
	return " | " + strings.Join(cells, " | ")
}

// header prints the report's title, the note that it is generated, what
// it measures, and where and when it ran.
func header(p func(string, ...any), f *figures, suite, title, about string, m machine) {
	p("# %s\n\n", title)
	p("<!-- Written by `go run ./cmd/report -suite %s` in benchmarks/: run it again rather than edit. -->\n\n", suite)
	if about != "" {
		p("%s\n\n", about)
	}
	date := m.date.Format("2006-01-02 15:04 MST")
	p("Machine: %s, %d CPUs, %s, %s, %s; load average (1, 5, 15 min) %s at the start, %s at the end.",
		m.cpu, m.cpus, m.osArch, m.goVersion, date, m.load, m.loadEnd)
	p(" The machine is shared with other work: timings move with the load, so compare figures within this run only; allocation counts and bytes do not move with it.\n\n")
	f.add("date", date)
	f.add("load", m.load)
	f.add("load at end", m.loadEnd)
	f.add("machine", fmt.Sprintf("%s, %d CPUs", m.cpu, m.cpus))
	f.add("go", m.goVersion)
	f.add("rounds", fmt.Sprint(m.rounds))
}
