package floodgate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// logUnits returns the time of every unit a sliding log counts at now,
// newest first, and the entries' times and running weights.
func logUnits(l *SlidingLog, st *slState, now int64) (units []int64, times []int64, upTo []uint32) {
	l.cur.Load().expire(st, now)
	for i := range int(st.count) {
		at := l.cur.Load().at(st, i)
		w := st.entry(i).total - st.low
		if i > 0 {
			w -= upTo[i-1]
		}
		times, upTo = append(times, at), append(upTo, st.entry(i).total-st.low)
		for range w {
			units = append(units, at)
		}
	}
	slices.Reverse(units)
	return units, times, upTo
}

// TestSlidingLogRestoreStep checks a sliding log's debt against the log
// it was taken from, for random logs at limits from 2 to the largest: the
// restored log counts the same units, none earlier than it came (the
// k-th newest restored unit is no older than the k-th newest real one,
// which decisions, refunds and expiry all keep: no forgiveness) and none
// later than the newest; its older entry, the step, is less than a grid
// step after an entry of the real log and holds no more units than came
// up to that entry. A log of two entries comes back as it was, the older
// entry less than a grid step late, when the step can hold its units
// exactly (up to 2^cbits units); and every restored log is at least as
// early as the old restore's, every unit at the newest entry.
func TestSlidingLogRestoreStep(t *testing.T) {
	for _, tc := range []struct {
		limit  int
		period time.Duration
	}{{2, time.Second}, {5, time.Minute}, {12, 7 * time.Minute}, {100, time.Minute}, {1000, time.Hour}, {MaxSlidingLogLimit, time.Minute}} {
		t.Run(fmt.Sprintf("%d per %v", tc.limit, tc.period), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.limit), 5))
			stepped, exactTwo := 0, 0
			for trial := 0; trial < 300; trial++ {
				clk := newSlClock()
				l, err := NewSlidingLog(Rate{tc.limit, tc.period}, WithClock(clk.now))
				require.NoError(t, err)
				grid := l.cur.Load().step.grid * l.cur.Load().unit
				entries := 1 + rng.IntN(min(tc.limit, 2+rng.IntN(40)))
				var now time.Duration
				left := tc.limit
				for i := 0; i < entries && left > 0; i++ {
					now += time.Duration(rng.Int64N(int64(tc.period) / int64(entries)))
					clk.set(now)
					n := 1 + rng.IntN(max(left/(entries-i), 1))
					mustAllowN(t, l, "k", n)
					left -= n
				}
				var real slState
				l.store.inspect(t, "k", func(st *slState, _ int64) {
					real = *st
					real.ring = slices.Clone(st.ring)
				})
				at := int64(now) + rng.Int64N(int64(tc.period))/4
				v := l.cur.Load().debt(&real, at)
				if !v.owes(at) {
					continue
				}
				var back slState
				l.cur.Load().restore(&back, v, at)
				require.Equal(t, v, l.cur.Load().debt(&back, at), "the restored log owes its debt")
				ru, rt, rw := logUnits(l, &real, at)
				bu, bt, bw := logUnits(l, &back, at)
				require.Len(t, bu, len(ru), "the restored log counts the units the real one did")
				for k := range ru {
					if bu[k] < ru[k] || bu[k] > rt[len(rt)-1] {
						t.Fatalf("unit %d of %v (%v) restored as %v (%v): earlier than it came, or later than the newest", k, rt, rw, bt, bw)
					}
				}
				require.LessOrEqual(t, len(bt), 2)
				if len(bt) == 2 {
					stepped++
					i, _ := slices.BinarySearch(rt, bt[0]+1)
					require.Greater(t, i, 0, "the step is before every real entry")
					require.Less(t, bt[0]-rt[i-1], grid, "the step is a grid step or more after the real entry %d", i-1)
					require.LessOrEqual(t, bw[0], rw[i-1], "the step holds units that came after its entry")
				}
				if len(rt) == 2 && rw[1] <= 1<<l.cur.Load().step.cbits {
					exactTwo++
					require.Len(t, bt, 2, "a log of two entries comes back in two")
					require.Equal(t, rw, bw, "with the units of each")
					require.Less(t, bt[0]-rt[0], grid)
				}
			}
			t.Logf("grid %v; %d restores with a step, %d of two entries back as they were", time.Duration(l0grid(tc.limit, tc.period)), stepped, exactTwo)
			require.Greater(t, stepped, 50)
		})
	}
}

// l0grid is a log's step grid in ns.
func l0grid(limit int, period time.Duration) int64 {
	unit := logUnit(int64(period))
	return newLogStep(limit, int64(period), unit).grid * unit
}

// TestDebtAmountsFitTheMemory: a debt's amount has amtBits bits in the
// debt memory and must stay below a shield's. A sliding counter's sum of
// counts (up to 2^31 when charged beyond its limit) is packed exactly
// below 2^25 and rounded up above, by less than a 2^19th, keeping the
// order of the sums (a shared bound, the larger amount, is the larger
// sum); a sliding log in debt beyond its limit owes the saturated
// amount, the largest of its limit's.
func TestDebtAmountsFitTheMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 19))
	sums := []uint64{0, 1, countExact - 1, countExact, countExact + 1, 1<<30 - 1, 1 << 30, 1<<31 - 1, 1 << 31}
	for range 20000 {
		sums = append(sums, rng.Uint64N(1<<31+1), rng.Uint64N(1<<26))
	}
	slices.Sort(sums)
	prev := uint32(0)
	for _, n := range sums {
		a := packCount(n)
		back := uint64(unpackCount(a))
		switch {
		case a >= markerAmt:
			t.Fatalf("sum %d packed as %#x: not below a shield", n, a)
		case n < countExact && back != n:
			t.Fatalf("sum %d came back as %d", n, back)
		case back < n || (back-n)<<countMantBits > n:
			t.Fatalf("sum %d came back as %d: below it, or more than a 2^19th above", n, back)
		case a < prev:
			t.Fatalf("sum %d packed as %#x, below the smaller sum's %#x", n, a, prev)
		}
		prev = a
	}
	for _, limit := range []int{1, 2, 5, 6, 7, 100, 1000, 1 << 15, MaxSlidingLogLimit} {
		l, err := NewSlidingLog(Rate{limit, time.Minute})
		require.NoError(t, err)
		sat := l.cur.Load().step.saturated()
		require.Less(t, sat, uint32(markerAmt), "limit %d", limit)
		require.Less(t, l.cur.Load().step.over(), uint32(markerAmt), "limit %d", limit)
		require.Less(t, l.cur.Load().step.ahead(1<<40), uint32(markerAmt), "limit %d", limit)
		require.Greater(t, l.cur.Load().step.ahead(1), l.cur.Load().step.over(), "limit %d: a bound of both must read as carried ahead", limit)
		for k := int64(1); k < 600; k++ {
			got, exact := l.cur.Load().step.windows(l.cur.Load().step.ahead(k))
			if exact && got != k || !exact && k < l.cur.Load().step.aheadMost() || got > k {
				t.Fatalf("limit %d: %d windows read back as %d (exact %v)", limit, k, got, exact)
			}
		}
		require.Greater(t, sat>>l.cur.Load().step.shift, uint32(limit), "limit %d: a log within its limit reaches the saturated amount", limit)
		require.GreaterOrEqual(t, sat, uint32(limit)<<l.cur.Load().step.shift|1<<l.cur.Load().step.shift-1, "limit %d: not the largest amount", limit)
	}
}

// TestRestoreSharedBoundOverAndAhead: a bound the debt memory shares
// (past its stated size) between a log over its limit (a downgrade under
// KeepUsed) and a log carrying a debt ahead whose last window ends later
// binds both. Restored as carried ahead in that debt's phase (before
// restoreBound), its anchor aged out 10 s after now; it then counted its
// limit, where the log over its limit still counted its older limit's
// units, and a refund let through what that log refused. Restored as the
// most units at the bound's newest time, it forgave the log carrying a
// debt ahead after a change of period (TestBoundedStoreForgaveAtTheseSeeds,
// trial 0). restoreBound anchors the most units at now, which binds the
// log over its limit for its Period, with a debt from there as long as
// the other's.
func TestRestoreSharedBoundOverAndAhead(t *testing.T) {
	a := newSLAlg(Rate{Limit: 5, Period: 30 * time.Second}, false, DefaultDebtLimits)
	now := int64(1000 * time.Second)
	var over, ahead, bound slState
	a.record(&over, now, 10) // as a downgrade from 10 a Period under KeepUsed leaves it
	a.record(&ahead, now-20*int64(time.Second), 5)
	a.charge(&ahead, now-20*int64(time.Second), 5) // 5 more in the window from now+10 s
	v := a.debt(&over, now).max(a.debt(&ahead, now))
	a.restore(&bound, v, now)
	later := now + 11*int64(time.Second)
	over.takeNewest(4)
	a.expire(&bound, later)
	bound.takeNewest(4)
	var got, want Decision
	a.decide(&got, &bound, later, 1)
	a.decide(&want, &over, later, 1)
	if got.Allowed && !want.Allowed {
		t.Fatalf("the shared bound allowed %+v where the log over its limit refused %+v", got, want)
	}
}

// TestRestoreDebtAheadWithinAUnit: a log carrying a debt ahead whose
// last window starts less than a time unit after now (its anchor that
// close to aging out), restored then, came back as one entry at the last
// window's date, which a downgrade to a Period of 15 s aged out 15 s
// later, while the exact log, its debt re-cut from its anchor, was
// refused until its old end 30 s later: 14 s of requests forgiven. It now
// comes back as a debt carried ahead from its own anchor (restoreAhead),
// which the change anchors at now as it does the exact log's.
func TestRestoreDebtAheadWithinAUnit(t *testing.T) {
	a := newSLAlg(Rate{Limit: 5, Period: 30 * time.Second}, false, DefaultDebtLimits)
	b := newSLAlg(Rate{Limit: 5, Period: 15 * time.Second}, false, DefaultDebtLimits)
	// The unit is 20 ns: the anchor, rounded up to it, is 15 ns less than
	// a Period before now.
	now := int64(1000*time.Second) + 105
	anchor := now - int64(30*time.Second) + 5
	var exact, restored slState
	a.record(&exact, anchor, 5)
	a.charge(&exact, anchor, 5) // 5 more, in the window that starts 15 ns from now
	v := a.debt(&exact, now)
	require.Equal(t, a.step.ahead(1), v.amt)
	require.Less(t, v.at-a.period-now, a.unit, "the last window must start within a unit of now")
	a.restore(&restored, v, now)
	a.convert(&exact, b, KeepUsed, now)
	a.convert(&restored, b, KeepUsed, now)
	for _, after := range []time.Duration{10 * time.Second, 16 * time.Second, 20 * time.Second, 29 * time.Second, 31 * time.Second} {
		e, r := exact, restored
		e.ring, r.ring = slices.Clone(exact.ring), slices.Clone(restored.ring)
		var got, want Decision
		b.decide(&got, &r, now+int64(after), 1)
		b.decide(&want, &e, now+int64(after), 1)
		if got.Allowed && !want.Allowed || got.Remaining > want.Remaining {
			t.Fatalf("%v after the downgrade: restored %+v, exact %+v: forgiven", after, got, want)
		}
	}
}
