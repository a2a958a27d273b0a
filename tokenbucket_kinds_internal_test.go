package floodgate

import (
	"testing"
	"time"
)

// An intervally refilled bucket restored as blocked (a debt shared with
// other keys: nothing until tat, full from then on) stays conservative
// when it is charged or booked: it stays blocked for the periods that
// return the tokens, and a booking's turn is the time it is full again.
func TestIntervalBlockedChargeAndBooking(t *testing.T) {
	b, err := NewTokenBucket(Rate{Limit: 2, Period: time.Second}, WithBurst(4), WithIntervalRefill())
	if err != nil {
		t.Fatal(err)
	}
	sec := int64(time.Second)
	st := tbState{tat: 5 * sec, frac: blocked}
	b.cur.Load().chargeInterval(&st, 4*sec, 3) // 3 tokens: two periods of 2
	if st.tat != 7*sec || st.frac != blocked {
		t.Fatalf("charged: %+v, want blocked until 7s", st)
	}
	var r Reservation
	b.cur.Load().reserveInterval(&r, &st, 4*sec, 1, int64(2*time.Second))
	if r.Allowed {
		t.Fatalf("a turn 3 s away booked within a maximum wait of 2 s: %+v", r)
	}
	b.cur.Load().reserveInterval(&r, &st, 4*sec, 1, int64(3*time.Second))
	if !r.Allowed || r.Wait != 3*time.Second || r.Remaining != 0 || st.tat != 8*sec || st.frac != blocked {
		t.Fatalf("booked: %+v, state %+v; want a wait of 3s, blocked until 8s", r, st)
	}
	var d Decision
	if b.cur.Load().decideInterval(&d, &st, 8*sec-1, 1); d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("1 ns before: %+v, want denied for 1ns", d)
	}
	if b.cur.Load().decideInterval(&d, &st, 8*sec, 4); !d.Allowed {
		t.Fatalf("once blocked no more: %+v, want the full burst", d)
	}
}
