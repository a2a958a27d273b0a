package floodgate

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Values carved from shared blocks never change once handed out, however
// many goroutines carve the same blocks after them: every value still
// reads what it was made from when all are done (a block written past
// its value, or handed to two goroutines at once, would show here, and
// to the race detector).
func TestHeaderValuesNeverChange(t *testing.T) {
	const goroutines, each = 8, 2000
	got := make([][]*headerValue, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := int64(g*each + i)
				// Lengths vary so that blocks fill by bytes as well as by count.
				text := strconv.AppendInt([]byte(strings.Repeat("x", i%40)), n, 10)
				got[g] = append(got[g], newHeaderValue(n, -n, text))
			}
		}()
	}
	wg.Wait()
	seen := make(map[*headerValue]bool)
	for g := range goroutines {
		for i, v := range got[g] {
			n := int64(g*each + i)
			want := strings.Repeat("x", i%40) + strconv.FormatInt(n, 10)
			if v.a != n || v.b != -n || v.value[0] != want {
				t.Fatalf("value %d: (%d, %d) %q, want (%d, %d) %q", n, v.a, v.b, v.value[0], n, -n, want)
			}
			if seen[v] {
				t.Fatalf("value %d handed out twice", n)
			}
			seen[v] = true
		}
	}
}

// A value longer than a block takes is made alone, whole.
func TestLongHeaderValue(t *testing.T) {
	long := strings.Repeat("n", maxBlockValue+1)
	v := newHeaderValue(1, 2, []byte(long))
	if v.value[0] != long || v.a != 1 || v.b != 2 {
		t.Fatalf("long value %q (%d, %d)", v.value[0], v.a, v.b)
	}
	short := newHeaderValue(3, 4, []byte("short"))
	if short.value[0] != "short" || v.value[0] != long {
		t.Fatalf("values %q and %q after another", v.value[0], short.value[0])
	}
}

// A long policy name still gets whole RateLimit values, from its own
// allocations rather than a block.
func TestRateLimitFieldLongName(t *testing.T) {
	name := strings.Repeat("p", 150)
	p, err := newPolicy(name, nopLimiter{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.rateLimitField(7, 42)[0], `"`+name+`";r=7;t=42`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
}
