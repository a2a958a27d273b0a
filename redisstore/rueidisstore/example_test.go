package rueidisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/rueidis"
)

// A sliding log on Redis through rueidis, with an in-memory fallback for
// when Redis cannot be reached and a deny cache for floods.
func ExampleNew() {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{redisAddr}, // e.g. "localhost:6379"; several for a Cluster
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// 5 sign-ups per minute per nickname pattern, exactly.
	rate := floodgate.Rate{Limit: 5, Period: time.Minute}
	local, err := floodgate.NewSlidingLog(rate) // per instance, only while Redis is down
	if err != nil {
		panic(err)
	}
	lim, err := redisstore.NewSlidingLog(rueidisstore.New(c), rate,
		redisstore.WithPrefix("example:rueidis:"+time.Now().Format("150405.000000")),
		redisstore.WithFallback(local),
		redisstore.WithDenyCache(10000))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := lim.AllowN(ctx, "abc{NUM}", 5)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = lim.Allow(ctx, "abc{NUM}")
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	// Output:
	// true 0
	// false 0 1m0s
}
