package interleave

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// RunSaturated makes each batch's calls from workers goroutines at
// once: the warm-up batch's first calls of a case wait for each other,
// which serial calls could never do. A round runs the baseline, then
// each other case followed by the baseline again, the others in an
// order that changes between rounds; every case's reading is paired
// with the baseline's around it.
func TestRunSaturatedAtOnce(t *testing.T) {
	const workers, batch, rounds = 4, 8, 12
	var (
		mu       sync.Mutex
		starts   []string
		arrived  atomic.Int32
		together = make(chan struct{})
	)
	call := func(name string, n *atomic.Int32) func() error {
		return func() error {
			k := n.Add(1)
			if k%batch == 1 {
				mu.Lock()
				starts = append(starts, name)
				mu.Unlock()
			}
			if name == "a" && k <= workers { // the warm-up's first calls
				if arrived.Add(1) == workers {
					close(together)
				}
				select {
				case <-together:
				case <-time.After(10 * time.Second):
					return errors.New("the first calls did not run at once")
				}
			}
			return nil
		}
	}
	var na, nb, nc atomic.Int32
	res, err := RunSaturated([]Case{{"a", call("a", &na)}, {"b", call("b", &nb)}, {"c", call("c", &nc)}}, rounds, batch, workers)
	if err != nil {
		t.Fatal(err)
	}
	if na.Load() != (1+3*rounds)*batch || nb.Load() != (1+rounds)*batch || nc.Load() != (1+rounds)*batch {
		t.Errorf("calls a %d, b %d, c %d; want %d, %d, %d", na.Load(), nb.Load(), nc.Load(),
			(1+3*rounds)*batch, (1+rounds)*batch, (1+rounds)*batch)
	}
	if len(res) != 3 || res[0].Name != "a" || res[1].Name != "b" || res[2].Name != "c" {
		t.Fatalf("results %+v", res)
	}
	if got := strings.Join(starts[:3], ""); got != "abc" {
		t.Errorf("warm-up in order %q, want abc", got)
	}
	orders := map[string]bool{}
	for r := range rounds {
		got := strings.Join(starts[3+5*r:3+5*r+5], "")
		if got != "abaca" && got != "acaba" {
			t.Fatalf("round %d ran %q, want abaca or acaba", r, got)
		}
		orders[got] = true
	}
	if len(orders) != 2 {
		t.Errorf("every round ran in the order %v", orders)
	}
	if res[0].CPU != nil { // where the CPU time can be read
		if len(res[0].CPU) != 3*rounds || len(res[1].CPU) != rounds || len(res[1].Base) != rounds || res[0].Base != nil {
			t.Errorf("readings: a %d, b %d against %d baselines, a's baselines %v", len(res[0].CPU), len(res[1].CPU), len(res[1].Base), res[0].Base)
		}
	}
	if res[0].Allocs < 0 || res[1].Allocs < 0 {
		t.Errorf("allocations %v, %v", res[0].Allocs, res[1].Allocs)
	}
}

// Overheads sets a case's readings against its own baselines where
// RunSaturated paired them, not against the first case's readings.
func TestOverheadsPairedBase(t *testing.T) {
	res := []Result{
		{Name: "bare", CPU: []float64{100, 900, 110, 500, 95, 300}, Allocs: 10},
		{Name: "limited", CPU: []float64{103, 505, 96}, Base: []float64{100, 500, 95}, Allocs: 13},
	}
	o := Overheads(res)[0]
	// Differences 3, 5, 1: sorted 1 3 5.
	if o.CPU != 3 || o.CPULow != 1 || o.CPUHigh != 3 || o.Allocs != 3 || !o.HasCPU {
		t.Errorf("overhead %+v, want CPU 3 (1–3), 3 allocs", o)
	}
}

// RunSaturated stops at the first error and names its case: no round
// runs after the warm-up's error, and a worker makes no call after its
// own error.
func TestRunSaturatedStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	for _, workers := range []int{1, 4} {
		var calls atomic.Int32
		cases := []Case{
			{"a", func() error { return nil }},
			{"b", func() error {
				if calls.Add(1) == 5 {
					return boom
				}
				return nil
			}},
		}
		_, err := RunSaturated(cases, 3, 100, workers)
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "b: ") {
			t.Fatalf("%d workers: RunSaturated: %v, want b: boom", workers, err)
		}
		// The other workers may run on until they see the error, but
		// not past the warm-up's batch; one worker stops at once.
		n, most := calls.Load(), int32(100)
		if workers == 1 {
			most = 5
		}
		if n > most {
			t.Errorf("%d workers: %d calls of b, want at most %d", workers, n, most)
		}
	}
}
