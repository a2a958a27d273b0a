package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// subject is the library the report is about. Its variants (another
// client, say) are named subject + "-" + variant; every other library is a
// peer.
const subject = "floodgate"

func isSubject(lib string) bool { return lib == subject || strings.HasPrefix(lib, subject+"-") }

// subjects returns the variants of floodgate measured in case c.
func (r *results) subjects(c string) []string {
	var s []string
	for _, lib := range r.libs[c] {
		if isSubject(lib) {
			s = append(s, lib)
		}
	}
	if len(s) == 0 {
		s = []string{subject} // shown as not measured
	}
	return s
}

// baseline is the hand-made peer; the summary also shows the best of the
// published libraries without it.
const baseline = "baseline"

// metric is a figure a case is judged by.
type metric struct {
	unit           string
	higherIsBetter bool
}

// cpuMetric is CPU time per decision: unlike wall time, it does not count
// the time the benchmark waited for a core, so it is steadier on a shared
// machine.
var cpuMetric = metric{unit: "cpu-ns/op"}

// metricsOf returns the figures case c is judged by, the headline first.
func metricsOf(c string) []metric {
	switch {
	case strings.HasPrefix(c, "Memory/"):
		return []metric{{unit: "B/key"}}
	case strings.HasPrefix(c, "Redis/"):
		return []metric{{unit: "decisions/s", higherIsBetter: true}, cpuMetric}
	}
	return []metric{{unit: "ns/op"}, cpuMetric}
}

// target is what issues 11 and 12 ask of floodgate in a case (keyed by
// the case, and the variant in brackets for a variant other than the
// go-redis one): a ratio to the
// best published library (the hand-made baseline is shown beside it, not
// judged against), an absolute bound, or both.
type target struct {
	ratio     float64 // floodgate ÷ best library: at most this (at least, for decisions/s); 0: none
	max       float64 // the headline figure, at most; 0: none
	maxAllocs float64 // allocs/op, at most; negative: no bound
	text      string
	// headlineOnly: the target is about the case's headline figure only
	// (decisions/s, B/key), not about its CPU time.
	headlineOnly bool
}

var targets = map[string]target{
	"Decision/hot":           {ratio: 0.75, maxAllocs: 0, text: "≤ 0.75, 0 allocs"},
	"Decision/100k-parallel": {ratio: 0.8, maxAllocs: 0, text: "≤ 0.8, 0 allocs"},
	"Middleware/allowed":     {ratio: 0.35, maxAllocs: 1, text: "≤ 0.35, ≤ 1 alloc"},
	"Middleware/denied":      {ratio: 0.25, maxAllocs: 0, text: "≤ 0.25, 0 allocs"},
	"Memory/100k":            {max: 100, maxAllocs: -1, text: "≤ 100 B/key, bounded", headlineOnly: true},
	// Issue 12: against redis_rate on the same go-redis client.
	"Redis/callers=1":                       {ratio: 1.0, maxAllocs: -1, text: "≥ 1.0", headlineOnly: true},
	"Redis/callers=256":                     {ratio: 2.0, maxAllocs: -1, text: "≥ 2.0", headlineOnly: true},
	"Redis/callers=256 (floodgate-rueidis)": {ratio: 2.5, maxAllocs: -1, text: "≥ 2.5", headlineOnly: true},
}

// floorCase holds BenchmarkFloor's steps; the floor of an in-memory
// decision is the sum of the three floodgate takes: the monotonic clock,
// the key's hash and an uncontended lock.
const floorCase = "Floor"

var floorSteps = []string{"time.Since", "maphash", "mutex"}

// floor returns the floor of a decision in unit, for the cases an
// in-memory decision is part of.
func (r *results) floor(c, unit string) (float64, bool) {
	if !strings.HasPrefix(c, "Decision/") && !strings.HasPrefix(c, "Middleware/") {
		return 0, false
	}
	sum := 0.0
	for _, step := range floorSteps {
		v, ok := r.median(floorCase, step, unit)
		if !ok {
			return 0, false
		}
		sum += v
	}
	return sum, true
}

// bounded reports whether lib's store in case c has a key bound; only the
// memory case reports it (as max-keys, 0 for none).
func (r *results) bounded(c, lib string) (bool, bool) {
	v, ok := r.median(c, lib, "max-keys")
	return v > 0, ok
}

// best returns the peer with the best median in c, among those keep
// admits.
func (r *results) best(c string, m metric, keep func(lib string) bool) (string, float64, bool) {
	var (
		name  string
		value float64
		found bool
	)
	for _, lib := range r.libs[c] {
		if isSubject(lib) || !keep(lib) {
			continue
		}
		v, ok := r.median(c, lib, m.unit)
		if !ok {
			continue
		}
		if !found || (m.higherIsBetter && v > value) || (!m.higherIsBetter && v < value) {
			name, value, found = lib, v, true
		}
	}
	return name, value, found
}

func (r *results) bestPeer(c string, m metric) (string, float64, bool) {
	if strings.HasPrefix(c, "Memory/") {
		return r.best(c, m, func(lib string) bool { b, _ := r.bounded(c, lib); return b })
	}
	return r.best(c, m, func(string) bool { return true })
}

func (r *results) bestLibrary(c string, m metric) (string, float64, bool) {
	return r.best(c, m, func(lib string) bool {
		if lib == baseline {
			return false
		}
		if strings.HasPrefix(c, "Memory/") {
			b, _ := r.bounded(c, lib)
			return b
		}
		return true
	})
}

func render(w io.Writer, m machine, r *results) error {
	// The first write error is the one returned; later writes are skipped.
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	f := newFigures()
	header(p, f, "comparison", "floodgate and the other Go rate limiters",
		"Every library on the same cases in the same run (benchmarks/README.md says what each case does and how each library is configured).", m)
	p("Each figure is the median of %d rounds (-benchtime %s; the memory case one store per round). "+
		"ns/op is wall time; cpu-ns/op is the process's CPU time per decision, which does not count waiting for a core.\n\n", m.rounds, m.benchtime)

	p("Targets are ratios to the best published library (no baseline) or absolute bounds. " +
		"The floor is BenchmarkFloor's clock (time.Since) + key hash (maphash) + uncontended lock, measured in the same run: no in-memory decision can cost less.\n\n")
	r.docsTable(p, f)
	p("<!-- table: summary -->\n")
	p("| case | figure | floodgate | best peer | floodgate ÷ best peer | best library (no baseline) | floodgate ÷ best library | floodgate allocs/op | target | met | floor | floodgate ÷ floor |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.cases {
		if c == floorCase {
			continue
		}
		for _, lib := range r.subjects(c) {
			r.summaryRows(p, f, c, lib)
		}
	}

	p("\n<!-- table: all -->\nAll figures (÷ best peer: the library's headline figure ÷ the best peer's; for ns/op and B/key lower is better, for decisions/s higher):\n\n")
	p("| case | library | figure | ÷ best peer | ns/op | cpu-ns/op | B/op | allocs/op |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.cases {
		mt := metricsOf(c)[0]
		_, bv, bok := r.bestPeer(c, mt)
		for _, lib := range r.libs[c] {
			name := lib
			if b, ok := r.bounded(c, lib); ok && !b {
				name += " (unbounded)"
			}
			v, ok := r.median(c, lib, mt.unit)
			fig := "—"
			if ok {
				fig = num(v, mt.unit) + " " + mt.unit
			}
			rt := ratio(v, bv, ok && bok)
			if c == floorCase {
				rt = "—" // steps of a decision, not libraries to rank
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", c, name, fig, rt,
				fmtUnit(r, c, lib, "ns/op"), fmtUnit(r, c, lib, "cpu-ns/op"), fmtUnit(r, c, lib, "B/op"), fmtUnit(r, c, lib, "allocs/op"))
			for _, unit := range []string{mt.unit, "ns/op", "cpu-ns/op", "B/op", "allocs/op"} {
				if v, ok := r.median(c, lib, unit); ok {
					f.add(c+"/"+lib+" "+unit, num(v, unit))
				}
			}
		}
	}
	if len(r.failures) > 0 {
		p("\nFailed (a decision other than the case expects, or an error): %s\n", strings.Join(dedupe(r.failures), ", "))
	}
	f.write(p)
	return err
}

func verdict(tg target, mt metric, fv float64, ok bool, lv, allocs float64, aok bool) string {
	if !ok {
		return "not measured"
	}
	good := true
	if tg.ratio > 0 {
		q := fv / lv
		good = q <= tg.ratio
		if mt.higherIsBetter {
			good = q >= tg.ratio
		}
	}
	if tg.max > 0 && fv > tg.max {
		good = false
	}
	if tg.maxAllocs >= 0 && (!aok || allocs > tg.maxAllocs) {
		good = false
	}
	if good {
		return "yes"
	}
	return "**no**"
}

func ratio(v, best float64, ok bool) string {
	if !ok || best == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v/best)
}

func fmtUnit(r *results, c, lib, unit string) string {
	v, ok := r.median(c, lib, unit)
	if !ok {
		return "—"
	}
	return num(v, unit)
}

// num formats a figure with the precision its size deserves.
func num(v float64, unit string) string {
	switch {
	case unit == "allocs/op" && v > 0 && v < 1:
		// A share of an allocation (a block carved among many calls):
		// rounded to 0 it would read as none.
		return fmt.Sprintf("%.2f", v)
	case (strings.HasSuffix(unit, "/best") || strings.HasSuffix(unit, "/redis_rate")) && math.Abs(v) < 10:
		// A ratio to the best peer or to redis_rate, read against
		// targets such as 0.8 or 1.0: 0.957 must not print as 1.0.
		return fmt.Sprintf("%.2f", v)
	case unit == "allocs/op" || unit == "B/op" || unit == "decisions/s":
		return fmt.Sprintf("%.0f", math.Round(v))
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// summaryRows prints the summary rows of floodgate variant lib in case c,
// one per metric.
func (r *results) summaryRows(p func(string, ...any), f *figures, c, lib string) {
	allocs, aok := r.median(c, lib, "allocs/op")
	// The memory case's allocs/op are those of populating a whole store,
	// not of one decision.
	if strings.HasPrefix(c, "Memory/") {
		aok = false
	}
	acell := "—"
	if aok {
		acell = num(allocs, "allocs/op")
	}
	name := c
	if lib != subject {
		name += " (" + lib + ")"
	}
	for i, mt := range metricsOf(c) {
		fv, fok := r.median(c, lib, mt.unit)
		bn, bv, bok := r.bestPeer(c, mt)
		ln, lv, lok := r.bestLibrary(c, mt)
		cell := func(name string, v float64, ok bool) string {
			if !ok {
				return "—"
			}
			return fmt.Sprintf("%s %s", name, num(v, mt.unit))
		}
		fcell := "—"
		if fok {
			fcell = num(fv, mt.unit)
		}
		tg, hasTarget := targets[name]
		met, tgText := "", ""
		if hasTarget && (i == 0 || !tg.headlineOnly) {
			tgText = tg.text
			met = verdict(tg, mt, fv, fok && (lok || tg.ratio == 0), lv, allocs, aok)
			if b, ok := r.bounded(c, lib); ok && !b {
				met = "**no** (unbounded)"
			}
		}
		flv, flok := r.floor(c, mt.unit)
		flcell := "—"
		if flok {
			flcell = num(flv, mt.unit)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, mt.unit, fcell, cell(bn, bv, bok), ratio(fv, bv, fok && bok),
			cell(ln, lv, lok), ratio(fv, lv, fok && lok), acell, tgText, met, flcell, ratio(fv, flv, fok && flok))
		// Named as the docs quote them: "Decision/hot/floodgate ÷ best
		// library cpu-ns/op".
		subj := c + "/" + lib
		if bok {
			f.add(c+" best peer "+mt.unit, bn)
			f.add(subj+" ÷ best peer "+mt.unit, ratio(fv, bv, fok))
		}
		if lok {
			f.add(c+" best library "+mt.unit, ln)
			f.add(subj+" ÷ best library "+mt.unit, ratio(fv, lv, fok))
		}
		if flok {
			f.add("floor "+mt.unit, flcell)
			f.add(subj+" ÷ floor "+mt.unit, ratio(fv, flv, fok))
		}
		if tgText != "" {
			f.add(subj+" target "+mt.unit, tgText)
			f.add(subj+" met "+mt.unit, strings.Trim(met, "*"))
		}
	}
}

// docsRow is a row of the table docs/performance.md quotes: a case, the
// floodgate variant, the figure it is judged by, and how to print it.
type docsRow struct {
	label, c, lib, unit string
	suffix              string // after floodgate's figure and each library's
	bytes               bool   // the memory case: bounded or not
}

var docsRows = []docsRow{
	{"decision, hot key", "Decision/hot", subject, "cpu-ns/op", " ns", false},
	{"decision, 100k keys, serial", "Decision/100k-serial", subject, "cpu-ns/op", " ns", false},
	{"decision, 100k keys, parallel", "Decision/100k-parallel", subject, "cpu-ns/op", " ns", false},
	{"middleware `ServeHTTP`, allowed, 100k client IPs", "Middleware/allowed", subject, "cpu-ns/op", " ns", false},
	{"middleware `ServeHTTP`, denied, hot key", "Middleware/denied", subject, "cpu-ns/op", " ns", false},
	{"bytes per tracked key, 100k keys", "Memory/100k", subject, "B/key", " B", true},
	{"Redis, go-redis, 256 callers (decisions/s)", "Redis/callers=256", subject, "decisions/s", "", false},
	{"Redis, rueidis, 256 callers (decisions/s)", "Redis/callers=256", subject + "-rueidis", "decisions/s", "", false},
	{"Redis, go-redis, 1 caller (decisions/s)", "Redis/callers=1", subject, "decisions/s", "", false},
}

// docsTable prints the summary docs/performance.md quotes whole: CPU
// time for the in-memory cases, bytes per key, decisions a second on
// Redis, each against the best other library (the hand-made baseline
// beside it), its target and its floor.
func (r *results) docsTable(p func(string, ...any), f *figures) {
	p("<!-- table: docs -->\n")
	p("| case (CPU ns/op) | floodgate | best other library | ÷ best library | target | ÷ floor | hand-made baseline | floodgate allocs/op |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for _, row := range docsRows {
		mt := metric{unit: row.unit, higherIsBetter: row.unit == "decisions/s"}
		fv, fok := r.median(row.c, row.lib, row.unit)
		if !fok {
			p("| %s | not measured | | | | | | |\n", row.label)
			continue
		}
		fcell := num(fv, row.unit) + row.suffix
		if row.bytes {
			if b, ok := r.bounded(row.c, row.lib); ok && b {
				fcell += ", bounded"
			} else {
				fcell += ", unbounded"
			}
		}
		ln, lv, lok := r.bestLibrary(row.c, mt)
		lcell, rcell := "—", "—"
		if lok {
			lcell = ln + " " + num(lv, row.unit) + row.suffix
			if row.bytes {
				lcell += " (bounded)"
			}
			rcell = ratio(fv, lv, true)
		}
		name := row.c
		if row.lib != subject {
			name += " (" + row.lib + ")"
		}
		tcell := ""
		if tg, ok := targets[name]; ok {
			allocs, aok := r.median(row.c, row.lib, "allocs/op")
			if row.bytes {
				aok = false
			}
			tcell = tg.text + " met"
			if verdict(tg, mt, fv, lok || tg.ratio == 0, lv, allocs, aok) != "yes" {
				tcell = tg.text + " missed"
			}
			if row.bytes {
				if b, ok := r.bounded(row.c, row.lib); !ok || !b {
					tcell = tg.text + " missed (unbounded)"
				}
			}
		}
		flcell := ""
		if flv, ok := r.floor(row.c, row.unit); ok {
			flcell = ratio(fv, flv, true)
		}
		bcell := ""
		if bv, ok := r.median(row.c, baseline, row.unit); ok {
			bcell = num(bv, row.unit) + row.suffix
		}
		acell := "—"
		if av, ok := r.median(row.c, row.lib, "allocs/op"); ok && !row.bytes {
			acell = num(av, "allocs/op")
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.label, fcell, lcell, rcell, tcell, flcell, bcell, acell)
	}
	p("\n")
}
