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
	p("Machine: %s, %d CPUs (shared with other work: compare figures within this run only), %s, %s, %s; load average at start %s.\n",
		m.cpu, m.cpus, m.osArch, m.goVersion, m.date.Format("2006-01-02 15:04 MST"), m.load)
	p("Each figure is the median of %d rounds (-benchtime %s; the memory case one store per round). "+
		"ns/op is wall time; cpu-ns/op is the process's CPU time per decision, which does not count waiting for a core.\n\n", m.rounds, m.benchtime)

	p("Targets are ratios to the best published library (no baseline) or absolute bounds. " +
		"The floor is BenchmarkFloor's clock (time.Since) + key hash (maphash) + uncontended lock, measured in the same run: no in-memory decision can cost less.\n\n")
	p("| case | figure | floodgate | best peer | floodgate ÷ best peer | best library (no baseline) | floodgate ÷ best library | floodgate allocs/op | target | met | floor | floodgate ÷ floor |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.cases {
		if c == floorCase {
			continue
		}
		for _, lib := range r.subjects(c) {
			r.summaryRows(p, c, lib)
		}
	}

	p("\nAll figures (÷ best peer: the library's headline figure ÷ the best peer's; for ns/op and B/key lower is better, for decisions/s higher):\n\n")
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
		}
	}
	if len(r.failures) > 0 {
		p("\nFailed (a decision other than the case expects, or an error): %s\n", strings.Join(dedupe(r.failures), ", "))
	}
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
	case unit == "allocs/op" || unit == "B/op" || unit == "decisions/s":
		return fmt.Sprintf("%.0f", math.Round(v))
	case v >= 100:
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
func (r *results) summaryRows(p func(string, ...any), c, lib string) {
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
	}
}
