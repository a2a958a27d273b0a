package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestShortDeadlineSparesOthers: a caller whose own deadline is short
// (a client may choose it: a gRPC call's grpc-timeout) and passes while
// the server is slow must not fail another caller's decision sent beside
// it on the same client. rueidis sends a command alone on its connection
// at once, with the connection's deadline set to the command's, and
// closes the connection when that deadline passes, failing the commands
// queued behind it with the deadline's error; under fail-open that error
// would admit the other caller uncharged. So the limiter gives rueidis no
// context of a caller's own, only one the decision timeout ends
// (groupcommit.Shared): the short caller leaves by its context, and the
// connection and the other call live on.
func TestShortDeadlineSparesOthers(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, c := range clients(t, srv.Addr) {
		t.Run(c.name, func(t *testing.T) {
			l, err := redisstore.NewTokenBucket(c.s, floodgate.PerHour(20), redisstore.WithPrefix(prefix(t)), patient)
			mustNot(t, err)
			// Once, so that the script is loaded and the connection made.
			if d, err := l.AllowN(context.Background(), "warm", 1); err != nil || !d.Allowed {
				t.Fatalf("warm-up: %+v, %v", d, err)
			}
			// Before the fix every round after the first failed on
			// rueidis.
			for round := 0; round < 10; round++ {
				// The server holds every client's commands for 60 ms.
				mustNot(t, rdb.Do(context.Background(), "CLIENT", "PAUSE", 60, "ALL").Err())
				short, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				shortErr := make(chan error, 1)
				go func() {
					_, err := l.AllowN(short, "short", 1)
					shortErr <- err
				}()
				time.Sleep(time.Millisecond) // the short call goes first, alone
				d, err := l.AllowN(context.Background(), "honest", 1)
				cancel()
				if err != nil {
					t.Fatalf("round %d: the honest caller's decision failed: %v", round, err)
				}
				if !d.Allowed || d.Remaining < 0 {
					t.Fatalf("round %d: honest decision %+v, want allowed", round, d)
				}
				if err := <-shortErr; err == nil {
					t.Fatalf("round %d: the short caller got an answer after its deadline, from a server paused past it", round)
				}
			}
		})
	}
}
