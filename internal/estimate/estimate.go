// Package estimate holds the arithmetic of the sliding-window counter's
// two-window estimate, shared by the in-memory floodgate.SlidingCounter and
// the Redis one so that both make the same decisions from the same counts.
//
// The estimate at elapsed time e into a fixed window of length Period is
// prev·(Period − e)/Period + cur. Every product is taken in 128 bits, so
// no Limit or Period overflows it.
package estimate

import "math/bits"

// Counter is the estimate for one rate: at most Limit events per Period
// nanoseconds.
type Counter struct {
	Limit  uint32
	Period int64
}

// Above reports whether prev·rest > room·Period: whether the previous
// window's share, rest nanoseconds before that window stops counting,
// exceeds room events.
func (c Counter) Above(prev uint32, rest int64, room uint32) bool {
	ah, al := bits.Mul64(uint64(prev), uint64(rest))
	bh, bl := bits.Mul64(uint64(room), uint64(c.Period))
	return ah > bh || (ah == bh && al > bl)
}

// Share returns ceil(prev·rest/Period): the previous window's events still
// weighing on the estimate, rounded up to whole events.
func (c Counter) Share(prev uint32, rest int64) uint32 {
	hi, lo := bits.Mul64(uint64(prev), uint64(rest))
	q, r := bits.Div64(hi, lo, uint64(c.Period)) // rest <= Period: q <= prev
	if r > 0 {
		q++
	}
	return uint32(q)
}

// RetryAt returns the earliest time at which estimate + n <= Limit, for a
// denied request in the fixed window beginning at start. The estimate only
// falls as time passes (it is continuous at window boundaries, where the
// current count becomes the previous one at full weight), so that time is
// when the previous count's share has shrunk enough: in this window if the
// current count leaves room for n, in the next one otherwise.
func (c Counter) RetryAt(start int64, prev, cur, n uint32) int64 {
	if cur+n <= c.Limit {
		// Denied, so prev > 0 and prev·Period > (Limit−cur−n)·Period.
		return start + c.ElapsedFor(prev, c.Limit-cur-n)
	}
	// Denied with cur+n > Limit >= n, so cur > 0.
	return start + c.Period + c.ElapsedFor(cur, c.Limit-n)
}

// ElapsedFor returns the smallest elapsed time e in [0, Period] with
// count·(Period − e) <= room·Period, that is
// Period − floor(room·Period/count); count is positive.
func (c Counter) ElapsedFor(count, room uint32) int64 {
	if room >= count {
		return 0
	}
	hi, lo := bits.Mul64(uint64(room), uint64(c.Period))
	q, _ := bits.Div64(hi, lo, uint64(count)) // room < count: q < Period
	return c.Period - int64(q)
}
