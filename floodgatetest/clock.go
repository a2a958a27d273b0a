package floodgatetest

import (
	"sync"
	"time"
)

// Clock is a manual clock: it stands still until the test moves it. Its Now
// method has the signature floodgate.WithClock expects, so a limiter under
// test reads the time the test chose and a refill never needs a sleep.
//
// A Clock is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*clockTimer // pending, in no order
}

// clockTimer is a timer of After: it fires once the clock reaches at.
type clockTimer struct {
	at time.Time
	c  chan time.Time
}

// NewClock returns a Clock that reads start until it is moved.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and returns the new time. A negative
// d moves it back, which a limiter may treat as it treats any clock step
// backwards.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fire()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.fire()
}

// After returns a channel that receives the clock's time once the clock
// has been moved d past now (at once if d <= 0), and a function that
// stops the timer, reporting whether it was still pending. Its signature
// is the one floodgate.WithWaitTimer expects, so that calls held for
// their turn wake when the test moves the clock, never by a real sleep.
func (c *Clock) After(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t.c, func() bool { return false }
	}
	c.timers = append(c.timers, t)
	return t.c, func() bool { return c.stop(t) }
}

// Timers returns how many timers of After are pending: a test waits for
// its goroutines to be asleep on the clock before it moves it.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// fire sends the time on every timer that is due, and forgets them; the
// caller holds c.mu.
func (c *Clock) fire() {
	pending := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			pending = append(pending, t)
			continue
		}
		t.c <- c.now // buffered: fires once
	}
	clear(c.timers[len(pending):])
	c.timers = pending
}

// stop removes t if it is pending.
func (c *Clock) stop(t *clockTimer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.timers {
		if p == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}
