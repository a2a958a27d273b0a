package floodgate

import (
	"sync/atomic"
	"time"
)

// clock turns time into int64 nanoseconds since the limiter was created.
//
// The default reads only the monotonic clock (time.Since on a time that
// carries a monotonic reading does a single runtime nanotime call), so a
// wall-clock step made by NTP or an operator neither releases a limited
// client nor blocks an idle one. An injected clock can step; a step
// backwards is held at the latest time the limiter has seen (high), across
// all keys, until the clock catches up. Each shard additionally never lets
// time go back between two decisions under its lock (see store.acquire),
// since two callers may read the clock in one order and lock in the other.
type clock struct {
	now   func() time.Time // nil: monotonic system clock
	epoch time.Time
	high  *atomic.Int64 // injected clocks only: latest nanos returned
}

func newClock(now func() time.Time) clock {
	if now == nil {
		return clock{epoch: time.Now()}
	}
	return clock{now: now, epoch: now(), high: new(atomic.Int64)}
}

// nanos returns the current time as nanoseconds since the epoch.
func (c *clock) nanos() int64 {
	if c.now == nil {
		return int64(time.Since(c.epoch))
	}
	t := int64(c.now().Sub(c.epoch))
	for {
		h := c.high.Load()
		if t <= h {
			return h
		}
		if c.high.CompareAndSwap(h, t) {
			return t
		}
	}
}

// sameClock reports whether a and b count time from one origin, as the
// limiters a plan factory builds do (see TokenBucketPlans).
func sameClock(a, b *clock) bool { return a.epoch == b.epoch && a.high == b.high }

// durationNS converts a non-negative count of nanoseconds to a Duration,
// clamping negative values (which only rounding could produce) to zero.
func durationNS(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
