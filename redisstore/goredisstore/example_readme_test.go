package goredisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/redis/go-redis/v9"
)

// newRedisClient connects go-redis the way the limiters need it.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true, // the decision timeout reaches the socket
		DialerRetries:         1,    // a down Redis fails at once as "connection refused", not as a timeout
	})
}

// newProbeLimit is the username probe's limit on Redis, shared by every
// instance: 10 per 10 minutes per client.
func newProbeLimit(rdb *redis.Client, local floodgate.Limiter) (*redisstore.TokenBucket, error) {
	return redisstore.NewTokenBucket(goredisstore.New(rdb),
		floodgate.Rate{Limit: 10, Period: 10 * time.Minute},
		redisstore.WithPrefix("fg:probe"),
		redisstore.WithFallback(local),   // while Redis is unreachable
		redisstore.WithDenyCache(10_000), // denied keys answered in process, up to 1 s each
	)
}

// The Redis guide's snippet (docs/redis.md), run: the probe's limit on
// Redis, with an in-memory fallback of the same rate.
func Example_readme() {
	rdb := newRedisClient(redisAddr)
	defer func() { _ = rdb.Close() }()
	local, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 10, Period: 10 * time.Minute})
	if err != nil {
		panic(err)
	}
	probe, err := newProbeLimit(rdb, local)
	if err != nil {
		panic(err)
	}
	// A client of its own, so that a rerun starts from a full bucket.
	client := "203.0.113.7-" + time.Now().Format("150405.000000")
	for i := 0; i < 11; i++ {
		d, err := probe.Allow(context.Background(), client)
		if err != nil {
			panic(err)
		}
		if i == 0 || i >= 9 {
			fmt.Println(i+1, d.Allowed, d.Remaining)
		}
	}
	// Output:
	// 1 true 9
	// 10 true 0
	// 11 false 0
}

// The snippet's client against a Redis that is down: the decision fails
// at once with the cause an operator needs, "connection refused", not
// with the decision timeout (go-redis's default DialerRetries retries a
// refused dial 5 times, 100 ms apart, past the 100 ms timeout).
func Example_redisDown() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	rdb := newRedisClient(addr)
	defer func() { _ = rdb.Close() }()
	lim, err := redisstore.NewTokenBucket(goredisstore.New(rdb), floodgate.PerMinute(10))
	if err != nil {
		panic(err)
	}
	_, err = lim.Allow(context.Background(), "203.0.113.7")
	fmt.Println("redis error:", errors.Is(err, redisstore.ErrRedis))
	fmt.Println("connection refused:", errors.Is(err, syscall.ECONNREFUSED))
	fmt.Println("timed out:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// redis error: true
	// connection refused: true
	// timed out: false
}
