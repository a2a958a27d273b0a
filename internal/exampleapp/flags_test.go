package exampleapp

import (
	"slices"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.0.0.0/8, 192.0.2.1 ,2001:db8::/32,")
	if err != nil {
		t.Fatal(err)
	}
	var strs []string
	for _, p := range got {
		strs = append(strs, p.String())
	}
	if want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"}; !slices.Equal(strs, want) {
		t.Fatalf("got %v, want %v", strs, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "nonsense"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) accepted an invalid prefix", bad)
		}
	}
}

func TestSplitComma(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"a", []string{"a"}},
		{" a ,b,, c ", []string{"a", "b", "c"}},
	} {
		if got := SplitComma(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("SplitComma(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
