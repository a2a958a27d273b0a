package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestConcurrentDecisionsAfterScriptFlush: after SCRIPT FLUSH, many
// concurrent decisions (batched together by the adapters) all get NOSCRIPT
// and load the script with EVAL; none is charged twice or lost. Half of
// them share one key, the others have a key each, on every algorithm and
// both clients; and the server saw more decisions than round trips
// (batches formed).
func TestConcurrentDecisionsAfterScriptFlush(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const callers = 64
	for _, c := range clients(t, addr) {
		for _, a := range algos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				l := a.mustNew(t, c.s, floodgate.Rate{Limit: 1000, Period: time.Hour},
					redisstore.WithPrefix(prefix(t)), redisstore.WithTimeout(5*time.Second))
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make(chan error, callers)
				for i := 0; i < callers; i++ {
					key := "shared"
					if i%2 == 1 {
						key = "own" + strconv.Itoa(i)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if d, err := l.AllowN(ctx, key, 1); err != nil || !d.Allowed {
							errs <- err
						}
					}()
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatalf("a concurrent decision failed: %v", err)
				}
				d, err := l.AllowN(ctx, "shared", 0)
				if err != nil || d.Remaining != 1000-callers/2 {
					t.Fatalf("shared key after %d decisions: %+v, %v; want Remaining %d (each charged once)", callers/2, d, err, 1000-callers/2)
				}
				for i := 1; i < callers; i += 2 {
					d, err := l.AllowN(ctx, "own"+strconv.Itoa(i), 0)
					if err != nil || d.Remaining != 999 {
						t.Fatalf("key own%d after one decision: %+v, %v; want Remaining 999", i, d, err)
					}
				}
			})
		}
	}
}

// TestGroupCommitBatches: under concurrent callers the go-redis adapter
// sends fewer round trips than decisions: the server reads several
// commands per read (INFO stats: total_reads_processed grows more slowly
// than the decisions).
func TestGroupCommitBatches(t *testing.T) {
	srv := redistest.Start(t)
	c := goRedis(t, srv.Addr)
	l := algos[0].mustNew(t, c.s, floodgate.Rate{Limit: 1_000_000, Period: time.Hour},
		redisstore.WithPrefix(prefix(t)), redisstore.WithTimeout(5*time.Second))
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "warm", 1); err != nil {
		t.Fatal(err)
	}
	before := readsProcessed(t, srv.Addr)
	const callers, each = 64, 50
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := l.AllowN(ctx, "k"+strconv.Itoa(g), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	reads := readsProcessed(t, srv.Addr) - before
	t.Logf("%d decisions in %d server reads", callers*each, reads)
	if reads*2 > callers*each {
		t.Fatalf("%d decisions took %d server reads: want at most half as many reads (batches)", callers*each, reads)
	}
}

// readsProcessed returns the server's total_reads_processed.
func readsProcessed(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Info(addr, "stats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_reads_processed in INFO stats")
	return 0
}
