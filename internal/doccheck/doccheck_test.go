package doccheck

import (
	"reflect"
	"testing"
)

func TestAnchors(t *testing.T) {
	lines := Prose([]string{
		"# floodgate",
		"### 1. Wrap a handler",
		"## Beyond a rate: cost after the response, in-flight caps, waiting",
		"## `KeyByIP` options",
		"```sh",
		"# a comment, no heading",
		"```",
		"## Redis",
		"## Redis",
		"## 한도 초과",
	})
	want := []string{"floodgate", "1-wrap-a-handler",
		"beyond-a-rate-cost-after-the-response-in-flight-caps-waiting",
		"keybyip-options", "redis", "redis-1", "한도-초과"}
	if got := Anchors(lines); !reflect.DeepEqual(got, want) {
		t.Errorf("Anchors = %q, want %q", got, want)
	}
}

// recorder counts the errors a check reports, so that a test can see a
// check fail.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

func TestLinksReportsBrokenOnes(t *testing.T) {
	r := &recorder{TB: t}
	n := Links(r, "testdata", "doc.md", func(string) bool { return false })
	if n != 5 {
		t.Errorf("checked %d links, want 5 (code blocks, code spans and URLs left out)", n)
	}
	if len(r.errors) != 2 {
		t.Errorf("reported %d broken links, want 2 (a missing file, a missing anchor): %q", len(r.errors), r.errors)
	}
}

func TestSnippetsReportsADifference(t *testing.T) {
	r := &recorder{TB: t}
	n := Snippets(r, "testdata", "doc.md", func(file string) bool { return true })
	if n != 2 || len(r.errors) != 1 {
		t.Errorf("checked %d snippets with %d errors, want 2 with 1 (the edited one)", n, len(r.errors))
	}
}

func TestFiguresReportsWrongQuotations(t *testing.T) {
	r := &recorder{TB: t}
	n := Figures(r, "testdata", "figures.md", "reports", func(report string) bool { return false })
	// 4 right and 3 wrong inline figures and 2 tables; the marker of a
	// missing report is an error, not a quotation checked.
	if n != 9 {
		t.Errorf("checked %d quotations, want 9", n)
	}
	want := []string{
		"%s:%d: the figure before <!-- figure: %s %s --> is not the report's %q (%s, %s)", // 45
		"%s:%d: the figure before <!-- figure: %s %s --> is not the report's %q (%s, %s)", // 144.9
		"%s:%d: report %s has no figure %q",
		"%s:%d: report %s: %v",
		"%s:%d quotes table %q of report %s, but it differs; the report has:\n%s",
	}
	if !reflect.DeepEqual(r.errors, want) {
		t.Errorf("errors:\n%q\nwant\n%q", r.errors, want)
	}
}

func TestFiguresLetsAnAbsentReportBe(t *testing.T) {
	r := &recorder{TB: t}
	Figures(r, "testdata", "figures.md", "reports", func(report string) bool { return report == "missing" })
	if len(r.errors) != 4 {
		t.Errorf("%d errors, want 4 (the absent report let be): %q", len(r.errors), r.errors)
	}
}

func TestBoundsNamesExistingTests(t *testing.T) {
	r := &recorder{TB: t}
	n := Bounds(r, "testdata", "figures.md", func(dir string) bool { return dir == "absent" })
	if n != 3 {
		t.Errorf("checked %d bound markers, want 3 (the absent directory's let be)", n)
	}
	if len(r.errors) != 1 {
		t.Errorf("%d errors, want 1 (TestNoSuchTest): %q", len(r.errors), r.errors)
	}
	r = &recorder{TB: t}
	Bounds(r, "testdata", "figures.md", func(string) bool { return false })
	if len(r.errors) != 2 {
		t.Errorf("%d errors with the absent directory required, want 2: %q", len(r.errors), r.errors)
	}
}

func TestUnquotedFindsMeasurements(t *testing.T) {
	var got []string
	for _, f := range Unquoted(t, "testdata", "figures.md") {
		got = append(got, f.Text)
	}
	// Not the quoted ones, the code span or block, 2^24, the bounded
	// multiple, nor "10 per 10 minutes"; the wrong quotations are
	// Figures' to report.
	want := []string{"47 B", "8 ×", "12 allocations"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Unquoted = %q, want %q", got, want)
	}
}

func TestForbiddenFindsUpwardNames(t *testing.T) {
	names := map[string]bool{"Outcome": true, "Call": true, "Gate": true, "MiddlewareOption": true}
	got, err := Forbidden("testdata/layers/limiter.go", names, map[string]bool{"net/http": true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"testdata/layers/limiter.go:5:2: imports net/http",
		"testdata/layers/limiter.go:24:24: names MiddlewareOption",
		"testdata/layers/limiter.go:26:12: names Outcome",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Forbidden =\n%q\nwant\n%q", got, want)
	}
}
