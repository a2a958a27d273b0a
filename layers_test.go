package floodgate_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/doccheck"
)

// layerLine matches the first line of a layer in doc.go's map:
//
//	//   - Limiters: limiter.go, tokenbucket.go, …
var layerLine = regexp.MustCompile(`^//\s+- (HTTP|Admission|Keys|Limiters): (.+)$`)

// layers reads doc.go's "Files" map: the root package's files by layer.
func layers(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]string{}
	layer := ""
	for _, line := range strings.Split(string(data), "\n") {
		if sm := layerLine.FindStringSubmatch(line); sm != nil {
			layer, line = sm[1], sm[2]
		} else if rest, ok := strings.CutPrefix(line, "//     "); ok && layer != "" {
			line = rest
		} else {
			layer = ""
			continue
		}
		for _, f := range strings.Split(line, ",") {
			if f = strings.TrimSuffix(strings.TrimSpace(f), "."); f != "" {
				m[layer] = append(m[layer], f)
			}
		}
	}
	return m
}

// TestLayerMap checks that doc.go's map names every non-test Go file of
// the root package once, and no file that does not exist: a newcomer
// finds a concept's room by it.
func TestLayerMap(t *testing.T) {
	mapped := map[string]string{}
	for layer, files := range layers(t) {
		for _, f := range files {
			if prev, ok := mapped[f]; ok {
				t.Errorf("doc.go puts %s in both %s and %s", f, prev, layer)
			}
			mapped[f] = layer
		}
	}
	if len(mapped) < 30 {
		t.Fatalf("doc.go's layer map names %d files; is it there?", len(mapped))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		if _, ok := mapped[f]; !ok {
			t.Errorf("doc.go's layer map does not name %s", f)
		}
		delete(mapped, f)
	}
	var gone []string
	for f := range mapped {
		gone = append(gone, f)
	}
	sort.Strings(gone)
	for _, f := range gone {
		t.Errorf("doc.go's layer map names %s, which does not exist", f)
	}
}

// upward are the names a limiter file must not use: the admission core's
// and the HTTP face's types. Issue 32 names the first four; the rest are
// the other types of those layers a limiter could be tempted to take.
var upward = map[string]bool{
	"Outcome": true, "Call": true, "Gate": true, "MiddlewareOption": true,
	"Policy": true, "PolicyFor": true, "PolicySelector": true, "SelectorFor": true,
	"Result": true, "DecisionEvent": true, "GateStats": true, "Quota": true,
	"KeyFunc": true, "Response": true, "middlewareConfig": true, "gateConfig": true,
}

// upwardImports are the imports a limiter file must not have.
var upwardImports = map[string]bool{"net/http": true, "net/http/httptest": true}

// limiterViolations returns where the files name an upward type or
// import net/http (doccheck.Forbidden).
func limiterViolations(t *testing.T, files []string) []string {
	t.Helper()
	var all []string
	for _, f := range files {
		found, err := doccheck.Forbidden(f, upward, upwardImports)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, found...)
	}
	return all
}

// TestLimiterFilesNameNoAdmission checks that no file of the limiter
// layer imports net/http or names a type of the admission core or the
// HTTP face (Outcome, Call, Gate, MiddlewareOption …): a limiter knows
// nothing of how it is called.
func TestLimiterFilesNameNoAdmission(t *testing.T) {
	files := layers(t)["Limiters"]
	if len(files) < 20 {
		t.Fatalf("doc.go's map names %d limiter files; is it read?", len(files))
	}
	for _, where := range limiterViolations(t, files) {
		t.Errorf("%s: a limiter file must not (move it to the admission core or the HTTP face)", where)
	}
}

// The check above fails on a limiter file that reaches up: charge.go as
// it was (the admission option WithSettledCost and Outcome.Context beside
// Charger), with inflight.go's key function over *http.Request and a
// helper taking a Policy.
func TestLimiterCheckCatchesABrokenFile(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "charge.go")
	src := `package floodgate

import (
	"context"
	"net/http"
)

type Charger interface {
	ChargeN(ctx context.Context, key string, n int) error
}

func WithSettledCost() MiddlewareOption { return nil }

func (out *Outcome) Context(ctx context.Context) context.Context { return ctx }

func serviceKey(*http.Request) (string, error) { return "", nil }

func claim(p Policy) error { return nil }
`
	if err := os.WriteFile(broken, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, where := range limiterViolations(t, []string{broken}) {
		got = append(got, strings.TrimPrefix(where, broken+":"))
	}
	want := []string{"5:2: imports net/http", "12:24: names MiddlewareOption", "14:12: names Outcome", "18:14: names Policy"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("found %q, want %q", got, want)
	}
}
