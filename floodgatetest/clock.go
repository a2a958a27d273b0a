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
	mu  sync.Mutex
	now time.Time
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
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
