package pace

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestWindow(t *testing.T) {
	var w Window
	for i, s := range []struct {
		at         time.Duration
		ok         bool
		suppressed uint64
	}{
		{0, true, 0},
		{time.Second / 2, false, 0},
		{time.Second - 1, false, 0},
		{time.Second, true, 2},
		{time.Second, false, 0},
		{5 * time.Second, true, 1},
	} {
		ok, n := w.Admit(t0.Add(s.at), time.Second)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d at %v: (%v, %d), want (%v, %d)", i, s.at, ok, n, s.ok, s.suppressed)
		}
	}
}

// A flood of new keys neither grows the table nor loses its count: the
// lines dropped are reported as other on the next line written.
func TestKeysBoundedUnderFlood(t *testing.T) {
	k := NewKeys(2)
	if ok, _, _ := k.Admit("a", t0, time.Minute); !ok {
		t.Fatal("first line of a refused")
	}
	if ok, _, _ := k.Admit("b", t0, time.Minute); !ok {
		t.Fatal("first line of b refused")
	}
	for i := 0; i < 100; i++ {
		if ok, _, _ := k.Admit(string(rune('c'+i)), t0, time.Minute); ok {
			t.Fatalf("key %d logged while the table is full of keys within their windows", i)
		}
	}
	if ok, _, _ := k.Admit("a", t0.Add(time.Second), time.Minute); ok {
		t.Fatal("a logged again within its window")
	}
	ok, suppressed, other := k.Admit("a", t0.Add(time.Minute), time.Minute)
	if !ok || suppressed != 1 || other != 100 {
		t.Errorf("a after its window: (%v, %d, %d), want (true, 1, 100)", ok, suppressed, other)
	}
	if k.keys.Len() != 2 {
		t.Errorf("table holds %d keys, want 2", k.keys.Len())
	}
	// An expired key makes room, handing its count on.
	ok, _, other = k.Admit("z", t0.Add(2*time.Minute), time.Minute)
	if !ok || other != 0 {
		t.Errorf("new key after expiry: (%v, other %d), want (true, 0)", ok, other)
	}
}

// A period below MinPeriod is raised to it.
func TestKeysMinPeriod(t *testing.T) {
	k := NewKeys(4)
	k.Admit("a", t0, 0)
	if ok, _, _ := k.Admit("a", t0.Add(MinPeriod-1), 0); ok {
		t.Error("logged again before MinPeriod")
	}
	if ok, n, _ := k.Admit("a", t0.Add(MinPeriod), 0); !ok || n != 1 {
		t.Errorf("after MinPeriod: (%v, %d), want (true, 1)", ok, n)
	}
}
