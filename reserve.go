package floodgate

import (
	"context"
	"time"
)

// Reserver is implemented by limiters that can book units ahead of time,
// as golang.org/x/time/rate's Reserve does: the units are taken now, with
// the time from which they are the caller's, so that callers are served
// in the order they booked. The admission core's waiting (WithWait) books
// a call's units, holds the call until its turn, and gives them back
// (RefundN) if the client hangs up meanwhile.
//
// A limiter whose type implements Reserver but that cannot book in its
// configuration (a redisstore limiter with leased quota) also has a
// method Reserves() bool that reports false; WithWait refuses it at
// construction.
type Reserver interface {
	Refunder
	// ReserveN takes n units for key if they are the caller's within
	// maxWait from now. If so, the Reservation is Allowed and its Wait
	// says how long the caller must wait before acting (0: at once);
	// otherwise nothing is taken, and its Decision is the denial AllowN
	// would have returned. maxWait <= 0 makes it AllowN. Errors are
	// AllowN's.
	ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (Reservation, error)
}

// Reservation is the outcome of ReserveN: a Decision, and for units
// booked ahead, the wait until they are the caller's. While the caller
// waits its units are taken, so the Decision reports the state after the
// booking: Remaining 0, and a ResetAfter that counts the booked units.
type Reservation struct {
	Decision
	// Wait is how long the caller must wait before using the units it
	// booked; 0 when they were there at once, or when it was denied.
	Wait time.Duration
}

// maxReserveWait bounds how far ahead a limiter books (2^61 ns, about 73
// years), so that a booking can never overflow its state's time.
const maxReserveWait = time.Duration(1) << 61

// canReserve reports whether l books ahead: a Reserver that does not say
// otherwise (see Reserver), or a Composite all of whose members do.
func canReserve(l Limiter) bool {
	if c, ok := l.(*Composite); ok {
		return c.every(canReserve)
	}
	if _, ok := l.(Reserver); !ok {
		return false
	}
	r, ok := l.(interface{ Reserves() bool })
	return !ok || r.Reserves()
}
