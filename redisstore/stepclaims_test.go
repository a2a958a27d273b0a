package redisstore

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// stepClaim finds a promise that Redis decides as memory does step by step.
var stepClaim = regexp.MustCompile(`(?i)step (for|by) step`)

// TestStepForStepClaimsNameTheClock: wherever the documentation promises
// that the Redis limiters make the in-memory decisions step for step (or
// step by step), the same paragraph says it holds on an injected clock:
// the Redis sliding counter's windows are aligned on the Unix epoch, the
// in-memory one's on its creation, so on the server's clock the two
// counters cut different windows (issue 30, item 8).
func TestStepForStepClaimsNameTheClock(t *testing.T) {
	files := []string{"README.md", "doc.go", "slidingcounter.go"}
	if _, err := os.Stat("../docs"); err == nil { // a checkout, not a module zip
		files = append(files, "../docs/redis.md", "../docs/middleware.md")
	}
	claims := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, para := range paragraphs(string(data)) {
			if !stepClaim.MatchString(para) || !strings.Contains(para, "emory") {
				continue // no claim, or not one about memory
			}
			claims++
			if !strings.Contains(strings.Join(strings.Fields(para), " "), "injected clock") {
				t.Errorf("%s: a step-for-step claim without the injected clock:\n%s", f, para)
			}
		}
	}
	if claims < 3 {
		t.Errorf("found %d step-for-step claims, want at least 3: the test reads the wrong files", claims)
	}
}

// paragraphs splits text at blank lines (Go comment lines count as blank
// when they hold only "//"), and splits list items apart.
func paragraphs(text string) []string {
	var out []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "//"))
		if l == "" {
			flush()
			continue
		}
		if strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "| ") {
			flush()
		}
		cur = append(cur, l)
	}
	flush()
	return out
}
