package metricsbase

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
)

// counts is a per-policy value for the tests: counts by outcome and how
// often init ran for it.
type counts struct {
	n     [NumOutcomes]atomic.Int64
	inits int
}

func newTable() *Policies[counts] {
	return NewPolicies(func(p *Policy[counts]) { p.V.inits++ })
}

// TestPoliciesBounded: names that cannot be labels share OtherPolicy, the
// table stops growing at MaxPolicies names plus OtherPolicy, and each
// name has one entry, made once.
func TestPoliciesBounded(t *testing.T) {
	tab := newTable()
	if p := tab.Get("bad\xffname"); p.Name != OtherPolicy {
		t.Fatalf("a name that is not ASCII is counted as %q, want %q", p.Name, OtherPolicy)
	}
	if p := tab.Get("tab\tname"); p.Name != OtherPolicy {
		t.Fatalf("a control character: counted as %q, want %q", p.Name, OtherPolicy)
	}
	first := tab.Get("client-0")
	for i := 0; i < MaxPolicies+100; i++ {
		name := "client-" + strconv.Itoa(i)
		p := tab.Get(name)
		// OtherPolicy took one of the MaxPolicies places first.
		want := name
		if i >= MaxPolicies-1 {
			want = OtherPolicy
		}
		if p.Name != want {
			t.Fatalf("%s counted as %q, want %q", name, p.Name, want)
		}
	}
	if tab.Get("client-0") != first {
		t.Fatal("a known name got a new entry")
	}
	n := 0
	for p := range tab.All() {
		if p.V.inits != 1 {
			t.Fatalf("%s: init ran %d times", p.Name, p.V.inits)
		}
		n++
	}
	if n != MaxPolicies {
		t.Fatalf("%d entries, want %d", n, MaxPolicies)
	}
	// A table full of real names still takes OtherPolicy in.
	full := newTable()
	for i := 0; i < MaxPolicies; i++ {
		full.Get("p" + strconv.Itoa(i))
	}
	if p := full.Get("one-more"); p.Name != OtherPolicy || p != full.Get("\x00") {
		t.Fatalf("past the bound: %q, want one shared %q", p.Name, OtherPolicy)
	}
	if n := len(*full.m.Load()); n != MaxPolicies+1 {
		t.Fatalf("%d entries, want MaxPolicies+1", n)
	}
}

// countingHook is a decision hook as the adapters write them.
func countingHook(tab *Policies[counts]) func(floodgate.DecisionEvent) {
	h := tab.NewHook()
	return func(ev floodgate.DecisionEvent) {
		if c, o, ok := h.Resolve(&ev); ok {
			c.n[o].Add(1)
		}
	}
}

// TestHook: the hook counts each event once under its policy and
// outcome, not the consumption after the handler, and stays right when
// the policies it sees alternate.
func TestHook(t *testing.T) {
	tab := newTable()
	hook := countingHook(tab)
	allow := floodgate.Decision{Allowed: true}
	for _, ev := range []floodgate.DecisionEvent{
		{Policy: "probe", Decision: allow},
		{Policy: "probe", Decision: allow, AfterHandler: true},
		{Policy: "login", Decision: allow},
		{Policy: "probe", Blocked: true},
		{Policy: "login"},
		{Policy: "probe", Err: metricstest.ErrDown},
		{Policy: "pr\u00f6be", Decision: allow},
		{Policy: "probe", Decision: allow},
		{Policy: "pr\u00f6be", Decision: allow},
	} {
		hook(ev)
	}
	want := map[string][NumOutcomes]int64{
		"probe":     {Allowed: 2, Denied: 1, Error: 1},
		"login":     {Allowed: 1, DryRunDenied: 1},
		OtherPolicy: {Allowed: 2},
	}
	got := map[string][NumOutcomes]int64{}
	for p := range tab.All() {
		var c [NumOutcomes]int64
		for o := range NumOutcomes {
			c[o] = p.V.n[o].Load()
		}
		got[p.Name] = c
	}
	if len(got) != len(want) {
		t.Fatalf("policies %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: counts %v, want %v", name, got[name], w)
		}
	}
}

// TestPoliciesConcurrent: lookups, new names, hooks and iteration at
// once (run with -race); no count is lost.
func TestPoliciesConcurrent(t *testing.T) {
	tab := NewPolicies(func(*Policy[counts]) {})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hook := countingHook(tab)
			for i := 0; i < 300; i++ {
				hook(floodgate.DecisionEvent{Policy: "p" + strconv.Itoa(i%11), Decision: floodgate.Decision{Allowed: true}})
				if i%50 == 0 {
					for range tab.All() {
					}
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for p := range tab.All() {
		total += p.V.n[Allowed].Load()
	}
	if total != 1200 {
		t.Fatalf("%d counted, want 1200", total)
	}
}

// TestDeclare: declared names have their entries before any decision,
// made once, and a decision under one finds that entry; a name floodgate
// would refuse, or more names than MaxPolicies, is an error that
// declares nothing.
func TestDeclare(t *testing.T) {
	tab := newTable()
	if err := tab.Declare([]string{"probe", "login", "probe"}); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for p := range tab.All() {
		got[p.Name] = p.V.inits
	}
	if len(got) != 2 || got["probe"] != 1 || got["login"] != 1 {
		t.Fatalf("entries after Declare: %v, want probe and login, made once each", got)
	}
	probe := tab.Get("probe")
	countingHook(tab)(floodgate.DecisionEvent{Policy: "probe", Blocked: true})
	if probe.V.n[Denied].Load() != 1 || probe.V.inits != 1 {
		t.Fatal("a decision under a declared policy did not use its entry")
	}

	many := make([]string, MaxPolicies+1)
	for i := range many {
		many[i] = "p" + strconv.Itoa(i)
	}
	for name, names := range map[string][]string{
		"empty":             {"ok", ""},
		"not ASCII":         {"pr\u00f6be"},
		"control character": {"a\tb"},
		"too many":          many,
	} {
		tab := newTable()
		err := tab.Declare(names)
		if !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: Declare = %v, want ErrInvalidOption", name, err)
		}
		for p := range tab.All() {
			t.Errorf("%s: %q declared despite the error", name, p.Name)
		}
	}
	// MaxPolicies names fit, with those already known counted.
	tab = newTable()
	tab.Get("seen")
	if err := tab.Declare(many[:MaxPolicies-1]); err != nil {
		t.Fatalf("MaxPolicies names in all: %v", err)
	}
	if err := tab.Declare([]string{"one-more"}); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Fatalf("one past MaxPolicies: %v, want ErrInvalidOption", err)
	}
}
