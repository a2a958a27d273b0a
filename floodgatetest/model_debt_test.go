package floodgatetest

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The window models carry a charge beyond the quota into the coming
// windows as the limiters do (floodgate's windowcharge_test.go pins the
// limiters to exact models of it); these steps pin the checker's models
// by hand. A step with charge > 0 charges instead of deciding.
type debtStep struct {
	at     time.Duration
	charge int
	n      int
	want   floodgate.Decision
}

func runDebt(t *testing.T, m checkModel, steps []debtStep) {
	t.Helper()
	for i, s := range steps {
		if s.charge > 0 {
			m.charge(s.at, s.charge)
			continue
		}
		got, err := m.allow(s.at, s.n)
		if err != nil || got != s.want {
			t.Fatalf("step %d (t=%v, n=%d): %+v %v\nwant %+v", i, s.at, s.n, got, err, s.want)
		}
	}
}

// A log charged 12 beyond its 5/s with 1 used records 4 at once and
// carries 8: 5 dated a second on, 3 two seconds on. A request waits for
// the 9th oldest unit (the 4th of the first carried window) and the log
// ends with the second window; at 2 s the first carried window has gone
// and the second is a real entry of 3.
func TestLogModelCarriesDebt(t *testing.T) {
	s := time.Second
	m := newLogModel(floodgate.PerSecond(5), false, floodgate.DebtLimits{})
	runDebt(t, m, []debtStep{
		{at: 0, n: 1, want: dec(true, 5, 4, 0, s)},
		{at: 0, charge: 12},
		{at: s / 2, n: 1, want: dec(false, 5, 0, 3*s/2, 5*s/2)},
		{at: 2*s - 1, n: 1, want: dec(false, 5, 0, 1, s+1)},
		{at: 2 * s, n: 2, want: dec(true, 5, 0, 0, s)},
		{at: 2 * s, n: 1, want: dec(false, 5, 0, s, s)},
	})
	// The bounds: PerCall a second (5 units on 5/s), Total two (10).
	m = newLogModel(floodgate.PerSecond(5), false, floodgate.DebtLimits{PerCall: time.Second, Total: 2 * time.Second})
	m.charge(0, 100) // 5 counted now, the rest forgiven
	m.charge(0, 100) // 5 carried
	m.charge(0, 100) // 5 more carried: the Total
	m.charge(0, 100) // nothing more
	if m.debt != 10 || m.real() != 5 {
		t.Fatalf("capped: %d carried, %d real; want 10 and 5", m.debt, m.real())
	}
}

// A counter charged 30 beyond its 10/min is denied until its carried
// windows have passed and the last one's 10 weigh 9: 3m6s, the wait
// floodgate's TestSlidingCounterCharge pins on the limiter.
func TestCounterModelCarriesDebt(t *testing.T) {
	m := newCounterModel(floodgate.Rate{Limit: 10, Period: time.Minute}, floodgate.DebtLimits{})
	wait := 3*time.Minute + 6*time.Second
	runDebt(t, m, []debtStep{
		{at: 0, charge: 30},
		{at: 0, n: 1, want: dec(false, 10, 0, wait, 4*time.Minute)},
		{at: wait - time.Millisecond, n: 1, want: dec(false, 10, 0, time.Millisecond, time.Minute-6*time.Second+time.Millisecond)},
		{at: wait, n: 1, want: dec(true, 10, 0, 0, 2*time.Minute-6*time.Second)},
	})
}
