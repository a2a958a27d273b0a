package floodgate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// exactLog is the sliding log as defined, with no bound of any kind:
// every recorded unit at its time, a charge of any weight. It is the
// reference the in-memory log is checked against once charges put it in
// debt.
type exactLog struct {
	limit  int
	period time.Duration
	times  []time.Time
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

func (m *exactLog) record(now time.Time, w int) {
	if k := len(m.times) - 1; k >= 0 && m.times[k].Equal(now) {
		m.ws[k] += w
		return
	}
	m.times, m.ws = append(m.times, now), append(m.ws, w)
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

// A sliding log in debt decides as the exact log with unbounded charges:
// the bounds on a debt (an entry weighs at most Limit) change no decision
// and no wait of a request of cost 1 or more. Random traffic with charges
// of up to 5 × Limit, while the log stays below the Limit entries that
// would fold it.
func TestSlidingLogChargeMatchesExact(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const limit, period = 50, time.Minute
	lim := mustWindowLog(t, floodgate.Rate{Limit: limit, Period: period}, func() time.Time { return now })
	model := &exactLog{limit: limit, period: period}
	rng := rand.New(rand.NewPCG(3, 4))
	debts := 0
	for i := 0; i < 2000; i++ {
		if rng.IntN(4) == 0 {
			n := 1 + rng.IntN(5*limit)
			if err := lim.ChargeN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			model.expire(now)
			model.record(now, n)
		} else {
			n := 1 + rng.IntN(3)
			want, wait := model.allow(now, n)
			d, err := lim.AllowN(ctx, "k", n)
			if err != nil || d.Allowed != want || d.RetryAfter != wait || d.Remaining != max(limit-model.used(), 0) {
				t.Fatalf("step %d at +%v, n=%d: %+v %v; want allowed %v, retry after %v, remaining %d",
					i, now.Sub(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), n, d, err, want, wait, max(limit-model.used(), 0))
			}
			if model.used() > limit {
				debts++
			}
		}
		now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
	}
	if debts < 100 {
		t.Errorf("only %d decisions in debt: the walk missed the case", debts)
	}
}

// A log that must fold (Limit entries already, a charge comes) never
// allows what the exact log denies: its units only count longer.
func TestSlidingLogFoldNeverForgives(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const limit, period = 4, time.Second
	lim := mustWindowLog(t, floodgate.Rate{Limit: limit, Period: period}, func() time.Time { return now })
	model := &exactLog{limit: limit, period: period}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 5000; i++ {
		if rng.IntN(3) == 0 {
			n := 1 + rng.IntN(3*limit)
			if err := lim.ChargeN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			model.expire(now)
			model.record(now, n)
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
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
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

// A sliding counter in debt is denied until its estimate falls back, with
// the wait its estimate gives, within two periods; a window's count
// saturates at 2^30 without wrapping.
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
	// The window of t0 holds 30: the next one starts at +1m, where 30
	// weigh fully and fall to 9 (room for 1) after 42 s of it.
	d, _ := sc.AllowN(ctx, "k", 1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Minute+42*time.Second {
		t.Fatalf("in debt: %+v, want denied for 1m42s", d)
	}
	now = t0.Add(time.Minute + 42*time.Second)
	if d, _ := sc.AllowN(ctx, "k", 1); !d.Allowed {
		t.Fatalf("after the debt: %+v", d)
	}
	for i := 0; i < 200; i++ {
		if err := sc.ChargeN(ctx, "s", 1<<24); err != nil {
			t.Fatal(err)
		}
	}
	d, err = sc.AllowN(ctx, "s", 1)
	if err != nil || d.Allowed || d.RetryAfter < time.Minute || d.RetryAfter > 2*time.Minute {
		t.Fatalf("saturated: %+v %v", d, err)
	}
	if err := sc.ChargeN(ctx, "s", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("negative charge: %v", err)
	}
}
