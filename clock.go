package floodgate

import "time"

// clock turns time into int64 nanoseconds since the limiter was created.
//
// The default reads only the monotonic clock (time.Since on a time that
// carries a monotonic reading does a single runtime nanotime call), so a
// wall-clock step made by NTP or an operator neither releases a limited
// client nor blocks an idle one. An injected clock is used as it is; the
// store holds its steps backwards (see shard.now).
type clock struct {
	now   func() time.Time // nil: monotonic system clock
	epoch time.Time
}

func newClock(now func() time.Time) clock {
	if now == nil {
		return clock{epoch: time.Now()}
	}
	return clock{now: now, epoch: now()}
}

// nanos returns the current time as nanoseconds since the epoch.
func (c *clock) nanos() int64 {
	if c.now == nil {
		return int64(time.Since(c.epoch))
	}
	return int64(c.now().Sub(c.epoch))
}

// time converts nanoseconds since the epoch back to a time.Time.
func (c *clock) time(ns int64) time.Time { return c.epoch.Add(time.Duration(ns)) }

// durationNS converts a non-negative count of nanoseconds to a Duration,
// clamping negative values (which only rounding could produce) to zero.
func durationNS(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
