package interleave

import (
	"errors"
	"strings"
	"testing"
)

// Overheads takes each round's difference to the baseline before the
// median: a round where everything ran slow does not count against a case.
func TestOverheadsPairRounds(t *testing.T) {
	res := []Result{
		{Name: "bare", CPU: []float64{100, 900, 110, 105, 95}, Allocs: 10},
		{Name: "limited", CPU: []float64{103, 905, 112, 300, 96}, Allocs: 13.5},
	}
	over := Overheads(res)
	if len(over) != 1 {
		t.Fatalf("%d overheads, want 1", len(over))
	}
	o := over[0]
	// Differences 3, 5, 2, 195, 1: sorted 1 2 3 5 195.
	if o.Name != "limited" || o.CPU != 3 || o.CPULow != 2 || o.CPUHigh != 5 || o.Allocs != 3.5 || !o.HasCPU {
		t.Errorf("overhead %+v, want limited: CPU 3 (2–5), 3.5 allocs", o)
	}
	if o.BaseCPU != 105 || o.BaseAlloc != 10 {
		t.Errorf("baseline %v ns, %v allocs; want 105, 10", o.BaseCPU, o.BaseAlloc)
	}
}

// Run calls every case batch times a round, in turn, and stops at the
// first error.
func TestRunInTurns(t *testing.T) {
	var order []string
	cases := []Case{
		{"a", func() error { order = append(order, "a"); return nil }},
		{"b", func() error { order = append(order, "b"); return nil }},
	}
	res, err := Run(cases, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "aabbaabb" {
		t.Errorf("calls in order %q, want aabbaabb", got)
	}
	if len(res) != 2 || res[0].Name != "a" || res[1].Name != "b" {
		t.Errorf("results %+v", res)
	}
	boom := errors.New("boom")
	cases[1].Call = func() error { return boom }
	if _, err := Run(cases, 2, 2); !errors.Is(err, boom) {
		t.Errorf("Run: %v, want boom", err)
	}
}
