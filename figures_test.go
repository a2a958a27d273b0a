package floodgate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate-go/floodgate/internal/doccheck"
)

// reports is where benchmarks/cmd/report writes the reports the docs
// quote, one per suite.
const reports = "benchmarks/reports"

// TestDocFigures checks the README's and the guides' figures and bounds
// (internal/doccheck's markers): each quoted figure is the value of the
// latest report of its suite, each quoted table is the report's table,
// and each bound names tests that exist. A measurement that neither
// quotes a report nor names a test fails, unless unquotedFigures lists
// it with the reason. In a module zip, where the benchmarks module and
// the nested modules' tests are absent, those quotations are let be.
func TestDocFigures(t *testing.T) {
	absent := func(dir string) func(string) bool {
		return func(string) bool {
			_, err := os.Stat(filepath.Join(dir, "go.mod"))
			return os.IsNotExist(err)
		}
	}
	nestedAbsent := func(dir string) bool {
		for d := dir; d != "." && d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				return false
			}
		}
		return true
	}
	figures, bounds := 0, 0
	for _, md := range guides(t) {
		figures += doccheck.Figures(t, ".", md, reports, absent("benchmarks"))
		bounds += doccheck.Bounds(t, ".", md, nestedAbsent)
		allowed := unquotedFigures[md]
		if _, ok := allowed["*"]; ok {
			continue
		}
		for _, f := range doccheck.Unquoted(t, ".", md) {
			if _, ok := allowed[f.Text]; !ok {
				t.Errorf("%s:%d: %q is a figure no run is named for: quote a benchmark report "+
					"(<!-- figure: REPORT NAME --> after it; benchmarks/cmd/report writes the reports), "+
					"name the tests that check it (<!-- bound: DIR TestName -->), or, if it is not a measurement, "+
					"list it in unquotedFigures with the reason", md, f.Line, f.Text)
			}
		}
	}
	if _, err := os.Stat(filepath.Join("benchmarks", "go.mod")); err == nil && figures < 20 {
		t.Errorf("checked %d quoted figures in the README and docs/; are the markers read?", figures)
	}
	if bounds < 10 {
		t.Errorf("checked %d bound markers in the README and docs/; are the markers read?", bounds)
	}
}

// TestUnquotedFiguresAreThere checks that every figure unquotedFigures
// lets be is still in its file unquoted: a list of exceptions that
// outlives them would let the next figure of that spelling through.
func TestUnquotedFiguresAreThere(t *testing.T) {
	for md, allowed := range unquotedFigures {
		seen := map[string]bool{}
		for _, f := range doccheck.Unquoted(t, ".", md) {
			seen[f.Text] = true
		}
		for text := range allowed {
			if text != "*" && !seen[text] {
				t.Errorf("unquotedFigures lists %q in %s, which has no such unquoted figure now: drop it", text, md)
			}
		}
	}
}

// fewKeysAB is the reason of the figures of issue 33's A/B of a default
// store's heap from 10 keys to its bound.
const fewKeysAB = "issue 33's A/B of a default store's heap at 10 keys to its bound against main: " +
	"both trees' BenchmarkDefaultStoreFewKeys and BenchmarkDefaultStoreBytesPerKey binaries alternated in one run, command, load and date in the text"

// unquotedFigures are the measurement-like figures of the README and the
// guides that are not quoted from a report nor bound by a test, by file,
// with the reason each may stay ("*": the whole file, for now).
var unquotedFigures = map[string]map[string]string{
	"docs/reliability.md": {"*": "each row's figures are what the test in its last column showed (its assertions are the bound, its log the figures) " +
		"when the row was written; no report runs those tests and records their logs yet"},
	"docs/keys.md":     {"20 KiB": "checkHoldback (16 KiB) and the read buffer (4 KiB), constants of multipartcheck.go"},
	"docs/limiters.md": {"1024 B": "DefaultMaxKeyLength, a default"},
	"docs/rates.md": {
		"200 B":          "PlanLimiter's cache entry, an estimate (the A/B below measured 195 B on 12-byte keys)",
		"20.9 µs":        "issue 29's A/B of its Redis conversion against main: one run of two trees, command, load and date in the text",
		"13.3 µs":        "issue 29's A/B of its Redis conversion against main: one run of two trees, command, load and date in the text",
		"7.63 µs":        "issue 29's A/B of PlanLimiter against main: one run of two trees, command, load and date in the text",
		"1.49 µs":        "issue 29's A/B of PlanLimiter against main: one run of two trees, command, load and date in the text",
		"22.1 µs":        "issue 29's A/B of PlanLimiter against main: one run of two trees, command, load and date in the text",
		"816 B":          "issue 29's A/B of PlanLimiter against main: one run of two trees, command, load and date in the text",
		"11 allocations": "issue 29's A/B of PlanLimiter against main: one run of two trees, command, load and date in the text",
		"155 B":          "issue 29's A/B of PlanLimiter against main: one run of two trees, command, load and date in the text",
		"12 bytes":       "the keys' length in that benchmark, a parameter",
	},
	"docs/redis.md": {"96 %": "the demand of the lease test's scenario, a parameter of the test"},
	"docs/performance.md": {
		"3 ×":        "issue 33's target for GC at 10⁷ keys against 10⁵, not a measurement",
		"50 B":       "issue 33's target for bytes per key, not a measurement",
		"64 B":       "issue 33's target for the debt memory, not a measurement",
		"8 B":        "the size of a debt memory word, a fact of the code (TestStateSizes)",
		"128 B":      "twice the default words of 8 B a key, the sizing code of the sliding log and interval bucket",
		"8 ×":        "issue 33's spray size for the debt memory's stated size, not a measurement",
		"35 %":       "a CPU profile of BenchmarkMiddleware/allowed/floodgate (command in the text, 2026-12-06 14:19 UTC): a profile, which no report records",
		"18 %":       "a CPU profile of BenchmarkMiddleware/allowed/floodgate (command in the text, 2026-12-06 14:19 UTC): a profile, which no report records",
		"10 %":       "a CPU profile of BenchmarkMiddleware/allowed/floodgate (command in the text, 2026-12-06 14:19 UTC): a profile, which no report records",
		"8 %":        "a CPU profile of BenchmarkMiddleware/allowed/floodgate (command in the text, 2026-12-06 14:19 UTC): a profile, which no report records",
		"63 CPU ns":  "BenchmarkParseIP (parseIP against parseIPForms, interleaved in one run), date and load in the text: no report runs it",
		"2 ns":       "BenchmarkParseIP (parseIP against parseIPForms, interleaved in one run), date and load in the text: no report runs it",
		"337 CPU ns": "issue 33's A/B of the middleware's allowed and denied paths against main: one run of two trees' benchmark binaries, interleaved, command, load and date in the text",
		"0.30 ×":     "issue 33's A/B of the middleware's allowed and denied paths against main: one run of two trees' benchmark binaries, interleaved, command, load and date in the text",
		"0.35 ×":     "issue 33's A/B of the middleware's allowed and denied paths against main: one run of two trees' benchmark binaries, interleaved, command, load and date in the text",
		"85 %":       "the share of the store's CPU samples in the bucket's Mutex.Lock in a CPU profile of BenchmarkScale at 10⁶ keys (command in the text, 2026-12-06 12:07 UTC): a profile, which no report records",

		// issue 33's A/B at few keys
		"46.9 B":      fewKeysAB,
		"41.9–42.2 B": fewKeysAB,
		"36.4 B":      fewKeysAB,
		"64.0–64.2 B": fewKeysAB,
		"49.4 B":      fewKeysAB,
		"41.4–41.5 B": fewKeysAB,
		"253–261 B":   fewKeysAB,
		"12.4 KiB":    fewKeysAB,
		"47.0–48.8 B": fewKeysAB,
		"45.5 B":      fewKeysAB,
		"63.8–64.0 B": fewKeysAB,
	},
	"docs/policies.md": {
		"7 ×":   "arithmetic on the replayed figures above (1,835,008 claims into a 262,144-key store)",
		"256 ×": "arithmetic: 256 client keys of 30 sign-ups an hour",
	},
	"docs/store.md": {
		"1024 B":     "DefaultMaxKeyLength, a default",
		"99.9–100 %": "TestSprayPrice's log (-v), not asserted: no report runs it",
		"100 %":      "TestSprayPrice's log (-v), not asserted: no report runs it",
		"58–59 %":    "TestSprayPrice's log (-v), not asserted: no report runs it",
		"92–95 %":    "TestSprayPrice's log (-v), not asserted: no report runs it",
		"32 KiB":     "the size above which Go allocates whole pages, a fact of the runtime",
		"8 ×":        "the spray size the debt memory's default is sized for, not a measurement",
		"0 %":        "TestSprayPrice at m = 8 under -short, from its log: no report runs it",

		// issue 33's A/B at few keys
		"46.9 B":        fewKeysAB,
		"41.9–42.2 B":   fewKeysAB,
		"36.4 B":        fewKeysAB,
		"64.0–64.2 B":   fewKeysAB,
		"49.4 B":        fewKeysAB,
		"41.4–41.5 B":   fewKeysAB,
		"253–261 B":     fewKeysAB,
		"12.4 KiB":      fewKeysAB,
		"401–405 B":     fewKeysAB,
		"1,266–1,277 B": fewKeysAB,
		"2,776–2,790 B": fewKeysAB,
	},
	"docs/turnstile.md": {"64 KiB": "the most of an answer read, a limit of the code"},
}
