package floodgate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// exactLog is the sliding log with its debt carried ahead, as ChargeN
// defines it, with no bound of any kind: every unit at its date, a
// charge of any weight, the units beyond the limit dated a window at a
// time after the newest unit dated up to now, each window holding the
// limit. It is the reference the in-memory log is checked against once
// charges put it in debt.
type exactLog struct {
	limit  int
	period time.Duration
	times  []time.Time // ascending; those after now are the debt's windows
	ws     []int
}

func (m *exactLog) expire(now time.Time) {
	i := 0
	for i < len(m.times) && !m.times[i].After(now.Add(-m.period)) {
		i++
	}
	m.times, m.ws = m.times[i:], m.ws[i:]
}

func (m *exactLog) used() int {
	u := 0
	for _, w := range m.ws {
		u += w
	}
	return u
}

// ahead reports whether the newest unit is dated after now: a debt.
func (m *exactLog) ahead(now time.Time) bool {
	return len(m.times) > 0 && m.times[len(m.times)-1].After(now)
}

func (m *exactLog) add(at time.Time, w int) {
	if k := len(m.times) - 1; k >= 0 && m.times[k].Equal(at) {
		m.ws[k] += w
		return
	}
	m.times, m.ws = append(m.times, at), append(m.ws, w)
}

// record records w units: at now, or in the newest window of a debt.
func (m *exactLog) record(now time.Time, w int) {
	if m.ahead(now) {
		m.ws[len(m.ws)-1] += w
		return
	}
	m.add(now, w)
}

// charge records w units beyond the limit if need be: what the window
// has room for at now, the rest filling the newest window of a debt,
// then one window more at a time.
func (m *exactLog) charge(now time.Time, w int) {
	m.expire(now)
	if !m.ahead(now) {
		fill := min(w, max(m.limit-m.used(), 0))
		if fill > 0 {
			m.add(now, fill)
		}
		if w -= fill; w == 0 {
			return
		}
		m.add(m.times[len(m.times)-1].Add(m.period), 0) // the first window
	}
	for {
		k := len(m.ws) - 1
		fill := min(w, m.limit-m.ws[k])
		m.ws[k] += fill
		if w -= fill; w == 0 {
			return
		}
		m.add(m.times[k].Add(m.period), 0)
	}
}

// allow decides n at now; a denial's wait is when enough units have left.
func (m *exactLog) allow(now time.Time, n int) (bool, time.Duration) {
	m.expire(now)
	used := m.used()
	if used+n <= m.limit {
		if n > 0 {
			m.record(now, n)
		}
		return true, 0
	}
	need, sum := used+n-m.limit, 0
	for i, w := range m.ws {
		if sum += w; sum >= need {
			return false, m.times[i].Add(m.period).Sub(now)
		}
	}
	panic("unreachable")
}

// A sliding log in debt decides as the exact log that carries the debt
// ahead: the debt's representation (one entry for every window it spans)
// changes no decision, no wait and no Remaining. Random traffic with
// charges of up to 5 × Limit, while the log stays below the Limit
// entries that would fold it; the limits on a debt are wide.
func TestSlidingLogChargeMatchesExact(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	const limit, period = 50, time.Minute
	lim, err := floodgate.NewSlidingLog(floodgate.Rate{Limit: limit, Period: period}, floodgate.WithClock(func() time.Time { return now }),
		floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: 1000 * time.Hour, Total: 1000 * time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	model := &exactLog{limit: limit, period: period}
	rng := rand.New(rand.NewPCG(3, 4))
	debts, carried := 0, 0
	for i := 0; i < 4000; i++ {
		if rng.IntN(5) == 0 {
			n := 1 + rng.IntN(5*limit)
			if err := lim.ChargeN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			model.charge(now, n)
		} else {
			n := 1 + rng.IntN(3)
			want, wait := model.allow(now, n)
			d, err := lim.AllowN(ctx, "k", n)
			if err != nil || d.Allowed != want || d.RetryAfter != wait || d.Remaining != max(limit-model.used(), 0) {
				t.Fatalf("step %d at +%v, n=%d: %+v %v; want allowed %v, retry after %v, remaining %d",
					i, now.Sub(t0), n, d, err, want, wait, max(limit-model.used(), 0))
			}
			if model.used() > limit {
				debts++
			}
			if model.ahead(now) {
				carried++
			}
		}
		now = now.Add(time.Duration(rng.IntN(8000)) * time.Millisecond)
	}
	if debts < 100 || carried < 100 {
		t.Errorf("only %d decisions in debt, %d with a debt carried ahead: the walk missed the case", debts, carried)
	}
}

// A log that must fold (Limit entries already, a charge comes) never
// allows what the exact log denies: its units only count longer. First a
// fold by hand: four entries of one unit, and a debt of one, which the
// exact log lets a request past once two of them have aged out; the
// folded log, whose four units now count as long as its newest, waits
// for that one. Then a random walk, on which the log never allows what
// the exact one denies.
func TestSlidingLogFoldNeverForgives(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	const limit, period = 4, time.Second
	lim := mustWindowLog(t, floodgate.Rate{Limit: limit, Period: period}, func() time.Time { return now })
	for i := range limit {
		now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if d, _ := lim.AllowN(ctx, "f", 1); !d.Allowed {
			t.Fatalf("entry %d: %+v", i, d)
		}
	}
	if err := lim.ChargeN(ctx, "f", 1); err != nil { // folds: the ring is full
		t.Fatal(err)
	}
	now = t0.Add(1150 * time.Millisecond) // the exact log counts 2 + 1 and allows 1
	if d, _ := lim.AllowN(ctx, "f", 1); d.Allowed || d.RetryAfter != 150*time.Millisecond {
		t.Fatalf("folded: %+v, want denied until the newest entry ages out at +1.3s", d)
	}

	model := &exactLog{limit: limit, period: period}
	rng := rand.New(rand.NewPCG(5, 6))
	now = t0
	for i := 0; i < 20000; i++ {
		if rng.IntN(4) == 0 {
			n := 1 + rng.IntN(limit)
			if err := lim.ChargeN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			model.charge(now, n)
		} else {
			want, _ := model.allow(now, 1)
			d, _ := lim.AllowN(ctx, "k", 1)
			if d.Allowed && !want {
				t.Fatalf("step %d: the log allowed what the exact log denies", i)
			}
			if !d.Allowed && want { // keep the model's count in step with what the log let through
				model.ws[len(model.ws)-1]--
			}
		}
		now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
	}
}

func mustWindowLog(t *testing.T, r floodgate.Rate, now func() time.Time) *floodgate.SlidingLog {
	t.Helper()
	l, err := floodgate.NewSlidingLog(r, floodgate.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// exactCounter is the sliding counter with its overflow carried ahead, as
// ChargeN defines it, with no bound: a count per fixed window, a charge
// filling the current window to the limit and each one after it in turn.
// A window's estimate is the previous window's count weighted by the
// share of it still inside the sliding window, plus its own count.
type exactCounter struct {
	limit  int64
	period int64           // ns
	counts map[int64]int64 // by fixed window
}

func (m *exactCounter) charge(now int64, n int64) {
	for w := now / m.period; n > 0; w++ {
		fill := min(n, max(m.limit-m.counts[w], 0))
		m.counts[w] += fill
		n -= fill
	}
}

// fitsAt reports whether n fits at now: the window's count leaves room,
// and the estimate too (compared exactly, in integers).
func (m *exactCounter) fitsAt(now, n int64) bool {
	w := now / m.period
	prev, cur := m.counts[w-1], m.counts[w]
	rest := m.period - (now - w*m.period)
	return cur+n <= m.limit && prev*rest <= (m.limit-cur-n)*m.period
}

// allow decides n at now; a denial's wait is the first time n fits, with
// nothing else counted meanwhile.
func (m *exactCounter) allow(now, n int64) (bool, time.Duration) {
	if m.fitsAt(now, n) {
		m.counts[now/m.period] += n
		return true, 0
	}
	t := now
	for w := now / m.period; ; w++ {
		start := w * m.period
		if m.counts[w]+n <= m.limit {
			// The first elapsed e at which prev·(P−e) <= room·P, found by
			// bisection on the exact comparison.
			lo, hi := max(t, start), start+m.period
			for lo < hi {
				mid := lo + (hi-lo)/2
				if m.fitsAt(mid, n) {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			if lo < start+m.period {
				return false, time.Duration(lo - now)
			}
		}
		t = start + m.period
	}
}

// A sliding counter in debt decides as the exact counter that carries
// its overflow into the coming windows: the carried state (the debt's
// last window, its count and the full one before) changes no decision
// and no wait. Random traffic with charges of up to 5 × Limit; the
// limits on a debt are wide.
func TestSlidingCounterChargeMatchesExact(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	const limit, period = 20, time.Minute
	sc, err := floodgate.NewSlidingCounter(floodgate.Rate{Limit: limit, Period: period}, floodgate.WithClock(func() time.Time { return now }),
		floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: 1000 * time.Hour, Total: 1000 * time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	model := &exactCounter{limit: limit, period: int64(period), counts: map[int64]int64{}}
	at := func() int64 { return int64(now.Sub(t0)) } // the counter's windows start at its creation
	rng := rand.New(rand.NewPCG(7, 8))
	carried := 0
	for i := 0; i < 4000; i++ {
		if rng.IntN(6) == 0 {
			n := 1 + rng.IntN(5*limit)
			if err := sc.ChargeN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			model.charge(at(), int64(n))
		} else {
			n := 1 + rng.IntN(3)
			want, wait := model.allow(at(), int64(n))
			d, err := sc.AllowN(ctx, "k", n)
			if err != nil || d.Allowed != want || d.RetryAfter != wait {
				t.Fatalf("step %d at +%v, n=%d: %+v %v; want allowed %v, retry after %v", i, now.Sub(t0), n, d, err, want, wait)
			}
			if model.counts[at()/int64(period)+1] > 0 {
				carried++
			}
		}
		now = now.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
	}
	if carried < 100 {
		t.Errorf("only %d decisions with a debt carried ahead: the walk missed the case", carried)
	}
}

// A sliding counter in debt is denied until its carried overflow has
// passed and the estimate falls back, with the wait that says so; charges
// past the debt limits saturate there, say so (ErrDebtCapped), and never
// wrap.
func TestSlidingCounterCharge(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	sc, err := floodgate.NewSlidingCounter(floodgate.Rate{Limit: 10, Period: time.Minute}, floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.ChargeN(ctx, "k", 30); err != nil {
		t.Fatal(err)
	}
	// The window of t0 counts 10, the next two 10 each (carried): the
	// one after them starts at +3m, where the last 10 weigh fully and
	// fall to 9 (room for 1) after 6 s of it.
	d, _ := sc.AllowN(ctx, "k", 1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 3*time.Minute+6*time.Second {
		t.Fatalf("in debt: %+v, want denied for 3m6s", d)
	}
	now = t0.Add(3*time.Minute + 6*time.Second - time.Millisecond)
	if d, _ := sc.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatalf("before the debt is paid: %+v", d)
	}
	now = t0.Add(3*time.Minute + 6*time.Second)
	if d, _ := sc.AllowN(ctx, "k", 1); !d.Allowed {
		t.Fatalf("after the debt: %+v", d)
	}
	capped := 0
	for i := 0; i < 200; i++ {
		switch err := sc.ChargeN(ctx, "s", 1<<24); {
		case errors.Is(err, floodgate.ErrDebtCapped):
			capped++
		case err != nil:
			t.Fatal(err)
		}
	}
	// DefaultDebtLimits: an hour's worth (600) per charge, a day's
	// windows (1440) ahead at most.
	d, err = sc.AllowN(ctx, "s", 1)
	if err != nil || d.Allowed || capped != 200 || d.RetryAfter < 24*time.Hour || d.RetryAfter > 24*time.Hour+2*time.Minute {
		t.Fatalf("saturated: %+v %v, %d capped; want denied a day, every charge capped", d, err, capped)
	}
	if err := sc.ChargeN(ctx, "s", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("negative charge: %v", err)
	}
}
