package goredisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/redis/go-redis/v9"
)

// A token bucket on Redis through go-redis: every instance of a service
// that builds it with the same prefix shares the clients' buckets.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  redisAddr, // e.g. "localhost:6379"
		ContextTimeoutEnabled: true,      // lets the per-decision timeout reach the socket
	})
	defer func() { _ = rdb.Close() }()

	// 2 per minute per client; the prefix names the policy.
	lim, err := redisstore.NewTokenBucket(goredisstore.New(rdb), floodgate.PerMinute(2),
		redisstore.WithPrefix("example:goredis:"+time.Now().Format("150405.000000")))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := lim.Allow(ctx, "203.0.113.9")
		if err != nil {
			panic(err) // Redis unreachable: the caller's error policy decides
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 30s
}
