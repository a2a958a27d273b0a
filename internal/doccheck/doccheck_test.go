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
