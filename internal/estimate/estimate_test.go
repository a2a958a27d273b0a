package estimate

import "testing"

// ElapsedFor must be the smallest e with count·(Period−e) <= room·Period,
// and Share the ceiling of prev·rest/Period: checked against brute force
// on small values, where every e can be tried.
func TestAgainstBruteForce(t *testing.T) {
	c := Counter{Limit: 7, Period: 60}
	for count := uint32(1); count <= 9; count++ {
		for room := uint32(0); room <= 9; room++ {
			want := int64(-1)
			for e := int64(0); e <= c.Period; e++ {
				if int64(count)*(c.Period-e) <= int64(room)*c.Period {
					want = e
					break
				}
			}
			if got := c.ElapsedFor(count, room); got != want {
				t.Errorf("ElapsedFor(%d, %d) = %d, want %d", count, room, got, want)
			}
		}
	}
	for prev := uint32(0); prev <= 9; prev++ {
		for rest := int64(0); rest <= c.Period; rest++ {
			want := uint32((int64(prev)*rest + c.Period - 1) / c.Period)
			if got := c.Share(prev, rest); got != want {
				t.Errorf("Share(%d, %d) = %d, want %d", prev, rest, got, want)
			}
			for room := uint32(0); room <= 9; room++ {
				if got, want := c.Above(prev, rest, room), int64(prev)*rest > int64(room)*c.Period; got != want {
					t.Errorf("Above(%d, %d, %d) = %v, want %v", prev, rest, room, got, want)
				}
			}
		}
	}
}

// RetryAt is when the estimate first lets n more events in: at that time
// it fits, one nanosecond earlier it does not.
func TestRetryAtIsTheFirstFit(t *testing.T) {
	c := Counter{Limit: 5, Period: 100}
	fits := func(t0, start int64, prev, cur, n uint32) bool {
		if t0 >= start+c.Period { // the next window: cur becomes prev
			start, prev, cur = start+c.Period, cur, 0
		}
		rest := c.Period - (t0 - start)
		return cur+n <= c.Limit && !c.Above(prev, rest, c.Limit-cur-n)
	}
	for prev := uint32(0); prev <= c.Limit; prev++ {
		for cur := uint32(0); cur <= c.Limit; cur++ {
			for n := uint32(1); n <= c.Limit; n++ {
				if fits(0, 0, prev, cur, n) {
					continue // not denied at the window's start
				}
				at := c.RetryAt(0, prev, cur, n)
				if !fits(at, 0, prev, cur, n) || (at > 0 && fits(at-1, 0, prev, cur, n)) {
					t.Errorf("RetryAt(prev %d, cur %d, n %d) = %d is not the first time n fits", prev, cur, n, at)
				}
			}
		}
	}
}
