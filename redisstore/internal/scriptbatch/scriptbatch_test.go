package scriptbatch

import (
	"errors"
	"reflect"
	"testing"
)

// TestBatchArgs: an entry whose arguments are those of the entry before
// it sends a header of "" and nothing more; any other sends the count and
// its arguments. The first entry always sends them.
func TestBatchArgs(t *testing.T) {
	var b Batch
	b.Add(7, "k1", []string{"", "1", "x"})
	b.Add(3, "k2", []string{"", "1", "x"})
	b.Add(9, "k3", []string{"", "2", "x"})
	b.Add(1, "k4", []string{"", "2"})
	b.Add(2, "k5", []string{"", "2"})
	b.Finish()
	want := []string{"5", "3", "", "1", "x", "", "3", "", "2", "x", "2", "", "2", ""}
	if !reflect.DeepEqual(b.Args, want) {
		t.Fatalf("args %q, want %q", b.Args, want)
	}
	if !reflect.DeepEqual(b.Keys, []string{"k1", "k2", "k3", "k4", "k5"}) || !reflect.DeepEqual(b.Calls, []int{7, 3, 9, 1, 2}) {
		t.Fatalf("keys %q, calls %v", b.Keys, b.Calls)
	}
}

// TestGroupSplitsFullBatches: a group starts a new batch of a script and
// slot when the open one holds MaxEntries, and keeps scripts and slots
// apart. docs/redis.md states the bound, 64, and quotes this test.
func TestGroupSplitsFullBatches(t *testing.T) {
	if MaxEntries != 64 {
		t.Fatalf("MaxEntries is %d: docs/redis.md says 64", MaxEntries)
	}
	s1, s2 := &Script{SHA: "a"}, &Script{SHA: "b"}
	var g Group
	for i := 0; i < MaxEntries+1; i++ {
		g.Add(s1, -1, i, "k", nil)
	}
	g.Add(s2, -1, 100, "k", nil)
	g.Add(s1, 5, 101, "k", nil)
	g.Add(s1, -1, 102, "k", nil)
	var sizes []int
	for _, b := range g.Batches {
		sizes = append(sizes, b.Len())
	}
	if !reflect.DeepEqual(sizes, []int{MaxEntries, 2, 1, 1}) {
		t.Fatalf("batch sizes %v, want [%d 2 1 1]", sizes, MaxEntries)
	}
	if g.Batches[1].Calls[1] != 102 || g.Batches[2].Script != s2 || g.Batches[3].Calls[0] != 101 {
		t.Fatalf("batches %+v", g.Batches)
	}
}

// TestSplit cuts replies, errors included, and refuses a reply of another
// number of entries before handing out any.
func TestSplit(t *testing.T) {
	msg := "ERR oops"
	r := []int64{2, 1, 2, 0, -1 - int64(len(msg))}
	for _, c := range msg {
		r = append(r, int64(c))
	}
	r = append(r, 1, -5)
	type entry struct {
		reply []int64
		err   error
	}
	var got []entry
	if err := Split(r, 4, func(i int, reply []int64, err error) {
		if i != len(got) {
			t.Fatalf("entry %d out of order", i)
		}
		got = append(got, entry{reply, err})
	}); err != nil {
		t.Fatal(err)
	}
	want := []entry{{[]int64{1, 2}, nil}, {[]int64{}, nil}, {nil, EntryError(msg)}, {[]int64{-5}, nil}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %+v, want %+v", got, want)
	}
	// An entry's reply cannot be grown into the next one's.
	if c := cap(got[0].reply); c != 2 {
		t.Fatalf("first reply has capacity %d, want 2", c)
	}
	for _, n := range []int{3, 5} {
		called := false
		err := Split(r, n, func(int, []int64, error) { called = true })
		if !errors.Is(err, ErrMalformedReply) || called {
			t.Fatalf("Split(%d entries of 4): %v, each called %v; want ErrMalformedReply and no call", n, err, called)
		}
	}
	if err := Split([]int64{3, 1}, 1, func(int, []int64, error) { t.Fatal("called") }); !errors.Is(err, ErrMalformedReply) {
		t.Fatalf("entry past the end: %v", err)
	}
}

// TestSlot holds Slot to Redis Cluster's key hash: the specification's
// check value and its hash tag rules.
func TestSlot(t *testing.T) {
	cases := []struct {
		key  string
		slot int
	}{
		{"123456789", 0x31C3 & 16383}, // CRC-16/XMODEM's check value
		{"", 0},
		{"{user1000}.following", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // an empty tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},
		{"foo{bar}{zap}", Slot("bar")},
		{"p:{client-1}:tb", Slot("client-1")},
		{"no{close", Slot("no{close")},
	}
	for _, c := range cases {
		if got := Slot(c.key); got != c.slot {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
	// Known slots (CLUSTER KEYSLOT on Redis 7.0).
	for key, slot := range map[string]int{"foo": 12182, "bar": 5061, "hello": 866, "somekey": 11058} {
		if got := Slot(key); got != slot {
			t.Errorf("Slot(%q) = %d, want %d", key, got, slot)
		}
	}
}
