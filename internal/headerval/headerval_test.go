package headerval

import "testing"

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
