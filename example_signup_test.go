package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A sign-up service, in business code: at most 5 sign-ups a minute per
// nickname pattern, so a macro registering abc1, abc2, … hits one limit;
// a nickname that forms no pattern falls back to a more lenient limit per
// client IP.
func Example_signupByNicknamePattern() {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := floodgate.WithClock(func() time.Time { return now })
	byPattern, err := floodgate.NewSlidingLog(floodgate.Rate{Limit: 5, Period: time.Minute}, clock)
	if err != nil {
		panic(err)
	}
	byIP, err := floodgate.NewSlidingLog(floodgate.Rate{Limit: 20, Period: time.Minute}, clock)
	if err != nil {
		panic(err)
	}
	signup := func(nickname, clientIP string) {
		lim, key := floodgate.Limiter(byIP), clientIP
		if pattern, ok := floodgate.NormalizePattern(nickname); ok {
			lim, key = byPattern, pattern
		}
		d, err := lim.AllowN(context.Background(), key, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-6s key %-10s allowed=%-5v remaining=%d\n", nickname, key, d.Allowed, d.Remaining)
	}
	for _, nick := range []string{"abc1", "abc2", "abc3", "abc4", "abc999", "abc6", "xyz1", "12345"} {
		signup(nick, "198.51.100.7")
		now = now.Add(time.Second)
	}
	// Output:
	// abc1   key abc{NUM}   allowed=true  remaining=4
	// abc2   key abc{NUM}   allowed=true  remaining=3
	// abc3   key abc{NUM}   allowed=true  remaining=2
	// abc4   key abc{NUM}   allowed=true  remaining=1
	// abc999 key abc{NUM}   allowed=true  remaining=0
	// abc6   key abc{NUM}   allowed=false remaining=0
	// xyz1   key xyz{NUM}   allowed=true  remaining=4
	// 12345  key 198.51.100.7 allowed=true  remaining=19
}
