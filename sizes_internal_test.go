package floodgate

import (
	"testing"
	"unsafe"
)

// TestStateSizes holds the sizes the docs state as facts of the code
// (docs/store.md, docs/performance.md): a word of the debt memory is 8
// bytes (a debt takes two exactly, one rounded up), its bucket one 64-byte
// cache line, and a tracked token bucket's or sliding counter's slot (its
// hash and state) 24. A change of layout that grows them fails here, so
// that the docs are changed with it.
func TestStateSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"debt word", unsafe.Sizeof(debtBucket{}) / debtWords, 8},
		{"debtBucket", unsafe.Sizeof(debtBucket{}), 64},
		{"slot[tbState]", unsafe.Sizeof(slot[tbState]{}), 24},
		{"slot[scState]", unsafe.Sizeof(slot[scState]{}), 24},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, the docs say %d", c.name, c.got, c.want)
		}
	}
}
