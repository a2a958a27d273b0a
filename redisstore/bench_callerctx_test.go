package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// BenchmarkCallerContext measures what a caller's context that can end
// costs a decision beside context.Background's: the token bucket on each
// client, at 1 and 256 callers, each caller deciding under
// context.Background ("background") or under a cancelable context of its
// own ("request", as an HTTP request's r.Context() is), every decision
// allowed, on a populated key set. Under a context that can end, the
// limiter bounds the call with a timer of its own (context.WithTimeout)
// and, on rueidis, sends its batch under a context only the decision
// timeout ends while a goroutine carries it (groupcommit.Bounded, Aside),
// so that a caller giving up never fails another's decision
// (TestSharedDialSparesOthers).
func BenchmarkCallerContext(b *testing.B) {
	addr := redistest.Shared(b)
	cs := clients(b, addr)
	rate := floodgate.Rate{Limit: 1000000, Period: time.Second}
	for _, callers := range []int{1, 256} {
		for _, kind := range []string{"background", "request"} {
			for _, c := range cs {
				l, err := redisstore.NewTokenBucket(c.s, rate, redisstore.WithPrefix(prefix(b)), redisstore.WithTimeout(10*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				f := func(ctx context.Context, key string) error {
					_, err := l.AllowN(ctx, key, 1)
					return err
				}
				b.Run(fmt.Sprintf("callers=%d/%s/%s", callers, kind, c.name), func(b *testing.B) {
					populate(b, f)
					b.ReportAllocs()
					var newCtx func() (context.Context, context.CancelFunc)
					if kind == "request" {
						newCtx = func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }
					}
					decideConcurrently(b, callers, newCtx, f)
				})
			}
		}
	}
}
