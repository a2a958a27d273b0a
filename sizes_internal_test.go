package floodgate

import (
	"testing"
	"unsafe"
)

// TestStateSizes holds the sizes the docs state as facts of the code
// (docs/store.md, docs/performance.md): a debt in the debt memory is 16
// bytes, and a tracked token bucket's or sliding counter's slot (its
// hash and state) 24. A change of layout that grows them fails here, so
// that the docs are changed with it.
func TestStateSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"debtEntry", unsafe.Sizeof(debtEntry{}), 16},
		{"slot[tbState]", unsafe.Sizeof(slot[tbState]{}), 24},
		{"slot[scState]", unsafe.Sizeof(slot[scState]{}), 24},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, the docs say %d", c.name, c.got, c.want)
		}
	}
}
