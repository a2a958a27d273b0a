package headerval

import (
	"strings"
	"testing"
)

func TestOne(t *testing.T) {
	for _, tt := range []struct {
		lines []string
		want  string
		ok    bool
	}{
		{nil, "", true},
		{[]string{" k1\t"}, "k1", true},
		{[]string{"k1", " k1 "}, "k1", true},
		{[]string{"", " "}, "", true},
		{[]string{"x1", "victim"}, "", false},
		{[]string{"", "victim"}, "", false},
		{[]string{"victim", ""}, "", false},
		{[]string{"victim", "victim", "x1"}, "", false},
	} {
		if v, ok := One(tt.lines); v != tt.want || ok != tt.ok {
			t.Errorf("One(%q) = %q, %v; want %q, %v", tt.lines, v, ok, tt.want, tt.ok)
		}
	}
}

// FuzzOne: lines (split at NUL) give one value only where a handler
// reading any of them — the first, the last, the first or last non-empty
// one, trimmed — reads that value; otherwise two lines differ.
func FuzzOne(f *testing.F) {
	f.Add("x1\x00victim")
	f.Add("\x00victim")
	f.Add(" k1\x00k1\t")
	f.Add("")
	f.Fuzz(func(t *testing.T, joined string) {
		lines := strings.Split(joined, "\x00")
		v, ok := One(lines)
		distinct := map[string]bool{}
		for _, l := range lines {
			distinct[strings.Trim(l, " \t")] = true
		}
		if ok != (len(distinct) == 1) {
			t.Fatalf("One(%q) = %q, %v; the lines give %d values", lines, v, ok, len(distinct))
		}
		if ok && !distinct[v] {
			t.Fatalf("One(%q) = %q; no line gives it", lines, v)
		}
	})
}
