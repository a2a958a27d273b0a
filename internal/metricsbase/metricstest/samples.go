package metricstest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// Only keeps the samples whose name starts with prefix.
func Only(s map[string]float64, prefix string) map[string]float64 {
	out := make(map[string]float64)
	for k, v := range s {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// Want fails t unless got has exactly the samples of want, listing every
// sample that differs or is missing on either side.
func Want(t testing.TB, got, want map[string]float64) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	keys := slices.Collect(maps.Keys(got))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range slices.Compact(keys) {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			fmt.Fprintf(&b, "\n  %s: got %v (present %v), want %v (present %v)", k, g, gok, w, wok)
		}
	}
	t.Fatalf("samples differ:%s", b.String())
}
