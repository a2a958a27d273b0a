package inherit

import (
	"math/bits"
	"math/rand"
	"testing"
)

// TestGreedyFastMatchesBig: the 128-bit conversion of a greedy bucket
// agrees with the big-integer one wherever it answers, on random rates,
// bursts, states and strategies, and answers for the common ones.
func TestGreedyFastMatchesBig(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	periods := []uint64{7, 1e6, 1e9, 1001e6, 60e9, 3600e9, 86400e9, 365 * 86400e9}
	pick := func() (Bucket, uint64, bool) {
		b := Bucket{Limit: uint64(1 + rng.Intn(1<<uint(rng.Intn(25)))), Period: periods[rng.Intn(len(periods))]}
		b.Burst = max(1, b.Limit+uint64(rng.Intn(3))-1)
		if rng.Intn(4) == 0 {
			b.Burst = uint64(1 + rng.Intn(1<<24))
		}
		hi, lo := bits.Mul64(b.Burst, b.Period)
		if hi >= b.Limit {
			return b, 0, false
		}
		tau, _ := bits.Div64(hi, lo, b.Limit)
		return b, tau, tau < 1<<61
	}
	answered := 0
	for i := 0; i < 20000; i++ {
		from, tau, ok1 := pick()
		to, _, ok2 := pick()
		if !ok1 || !ok2 {
			continue
		}
		ahead, frac := uint64(rng.Int63n(int64(tau)+1)), uint64(rng.Int63n(int64(from.Limit)))
		how := Strategy(rng.Intn(3))
		fast, okFast := greedyFast(ahead, frac, from, to, how)
		slow, okBig := greedyBig(ahead, frac, from, to, how)
		if !okFast {
			continue
		}
		answered++
		if !okBig || fast != slow {
			t.Fatalf("%v from %+v to %+v, ahead %d+%d: fast %d, big %d (%v)", how, from, to, ahead, frac, fast, slow, okBig)
		}
	}
	if answered < 5000 {
		t.Fatalf("the fast path answered %d times of 20000", answered)
	}
}

// TestUnits pins each strategy on an upgrade and a downgrade.
func TestUnits(t *testing.T) {
	tests := []struct {
		how       Strategy
		u, c, c2  uint64
		want      uint64
		situation string
	}{
		{KeepUsed, 7, 10, 20, 7, "upgrade: what was used stays used"},
		{KeepUsed, 7, 10, 5, 7, "downgrade: more used than the new capacity"},
		{ScaleUsed, 7, 10, 20, 14, "upgrade: the same share"},
		{ScaleUsed, 7, 10, 5, 4, "downgrade: 3.5 rounded up"},
		{ScaleUsed, 12, 10, 20, 20, "owing more than the capacity: scaled up to the larger of u and c2"},
		{AddDifference, 7, 10, 20, 7, "upgrade: the difference is added to what is left"},
		{AddDifference, 7, 10, 5, 2, "downgrade: what was left (3) is kept"},
		{AddDifference, 3, 10, 5, 0, "downgrade: 7 left, held at the new capacity"},
		{StartFresh, 7, 10, 5, 0, "everything forgotten"},
	}
	for _, tt := range tests {
		if got := tt.how.Units(tt.u, tt.c, tt.c2); got != tt.want {
			t.Errorf("%d.Units(%d, %d, %d) = %d, want %d (%s)", tt.how, tt.u, tt.c, tt.c2, got, tt.want, tt.situation)
		}
	}
}

// TestCountsKeepOrder checks, over every pair of small states and every
// change between small capacities, what a bounded store needs of a
// counter's conversion: a state that counts at least as much in its
// current window and in both windows together converts to one that does
// too, and the sum converts to Units of it. The case the randomized
// replay found (issue 29, item 12): from 5 to 10 under ScaleUsed, (6, 4),
// the bound of (2, 3) restored from a shared bound and spent on, became
// (6, 4) while (2, 3) became (2, 8).
func TestCountsKeepOrder(t *testing.T) {
	if p, c := ScaleUsed.Counts(6, 3, 5, 10); c < 8 || p+c != 10 {
		t.Errorf("ScaleUsed.Counts(6, 3, 5, 10) = (%d, %d): the current count must be at least (2, 3)'s 8", p, c)
	}
	for _, how := range []Strategy{KeepUsed, ScaleUsed, AddDifference, StartFresh} {
		for c := uint64(1); c <= 6; c++ {
			for c2 := uint64(1); c2 <= 13; c2++ {
				type state struct{ p, c uint64 }
				var states []state
				for p := uint64(0); p <= 2*c+1; p++ {
					for q := uint64(0); q <= 2*c+1; q++ {
						states = append(states, state{p, q})
					}
				}
				for _, a := range states {
					ap, ac := how.Counts(a.p, a.c, c, c2)
					if ap+ac != how.Units(a.p+a.c, c, c2) {
						t.Fatalf("%d: (%d, %d) from %d to %d became (%d, %d), not Units of its sum", how, a.p, a.c, c, c2, ap, ac)
					}
					for _, b := range states {
						if a.c < b.c || a.p+a.c < b.p+b.c {
							continue // a does not count at least as much as b
						}
						bp, bc := how.Counts(b.p, b.c, c, c2)
						if ac < bc || ap+ac < bp+bc {
							t.Fatalf("%d from %d to %d: (%d, %d) ≥ (%d, %d) became (%d, %d) and (%d, %d): the order is lost",
								how, c, c2, a.p, a.c, b.p, b.c, ap, ac, bp, bc)
						}
					}
				}
			}
		}
	}
}
