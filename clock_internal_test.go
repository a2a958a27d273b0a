package floodgate

import (
	"strings"
	"testing"
)

// The default clock must measure time with the monotonic reading only, so
// that an NTP step or an operator changing the wall clock, backwards or
// forwards, moves no limit. time.Since uses only the monotonic reading when
// its argument carries one; this checks that the epoch does.
func TestDefaultClockIsMonotonic(t *testing.T) {
	c := newClock(nil)
	if c.now != nil || !strings.Contains(c.epoch.String(), " m=+") {
		t.Fatalf("default clock epoch %q carries no monotonic reading", c.epoch.String())
	}
	a := c.nanos()
	b := c.nanos()
	if a < 0 || b < a {
		t.Fatalf("monotonic nanos went %d then %d", a, b)
	}
}
