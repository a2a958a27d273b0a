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

// TestLimiterFilesNameNoAdmission checks that no file of the limiter
// layer imports net/http or names Outcome, Call, Gate or MiddlewareOption
// (doccheck.Forbidden): a limiter knows nothing of how it is called.
func TestLimiterFilesNameNoAdmission(t *testing.T) {
	names := map[string]bool{"Outcome": true, "Call": true, "Gate": true, "MiddlewareOption": true}
	imports := map[string]bool{"net/http": true, "net/http/httptest": true}
	for _, f := range layers(t)["Limiters"] {
		found, err := doccheck.Forbidden(f, names, imports)
		if err != nil {
			t.Fatal(err)
		}
		for _, where := range found {
			t.Errorf("%s: a limiter file must not (move it to the admission core or the HTTP face)", where)
		}
	}
}
