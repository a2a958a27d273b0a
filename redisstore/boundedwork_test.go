package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// steppingClock reads one microsecond later at every call, from any
// goroutine.
type steppingClock struct{ us atomic.Int64 }

func (c *steppingClock) Now() time.Time { return time.UnixMicro(c.us.Add(1)) }

// fillLog spends a sliding log's whole limit on key one unit per decision,
// each at its own microsecond, from 32 goroutines.
func fillLog(t *testing.T, l *redisstore.SlidingLog, key string, limit int) {
	t.Helper()
	var wg sync.WaitGroup
	var next, failed atomic.Int64
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(limit) {
				if d, err := l.AllowN(context.Background(), key, 1); err != nil || !d.Allowed {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d decisions of the fill failed or were denied", failed.Load())
	}
}

// TestSlidingLogBoundedWork (issue 18, item 4): on a full log of 16,384
// one-unit entries, a denied AllowN of the whole limit runs a bounded
// number of Redis commands inside its script (a binary search over running
// totals, not a walk: before, one ZRANGE per 64 entries, 256 of them), and
// a decision after half the log has aged out removes at most 16 entries
// (before, all 8,192 at once, each read in Lua), while deciding exactly.
func TestSlidingLogBoundedWork(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const limit = 1 << 14
	for _, c := range clients(t, srv.Addr) {
		t.Run(c.name, func(t *testing.T) {
			clock := &steppingClock{}
			clock.us.Store(t0.UnixMicro())
			p := prefix(t)
			l, err := redisstore.NewSlidingLog(c.s, floodgate.Rate{Limit: limit, Period: time.Hour},
				patient, redisstore.WithPrefix(p), redisstore.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			mid := clock.us.Load() + limit/2
			fillLog(t, l, "k", limit)

			before := commandCalls(t, srv.Addr)
			mustAllowed(t, l, "k", limit, false)
			after := commandCalls(t, srv.Addr)
			inside := after[""] - before[""] - 2 // less the EVALSHA and the INFO
			t.Logf("a denied AllowN(%d) on a full log ran %d commands in its script", limit, inside)
			if inside > 64 {
				t.Errorf("a denied AllowN(%d) on a full log ran %d commands in its script, want at most 64", limit, inside)
			}

			var zset string
			for _, k := range clientKeys(t, rdb, p, "k") {
				if rdb.Type(ctx, k).Val() == "zset" {
					zset = k
				}
			}
			held := rdb.ZCard(ctx, zset).Val()
			// Half the log ages out.
			clock.us.Store(mid + time.Hour.Microseconds())
			d := mustAllowed(t, l, "k", 1, true)
			removed := held - rdb.ZCard(ctx, zset).Val() + 1
			t.Logf("a decision after half the log aged out removed %d of %d entries", removed, held)
			if removed > 16 {
				t.Errorf("a decision after half the log aged out removed %d of %d entries, want at most 16", removed, held)
			}
			// The fill's 32 goroutines read the clock and reach Redis in
			// different orders, so the entries' times around mid are only
			// nearly in request order: a few more or fewer than half may
			// have aged out. Exactness is TestSlidingLogLongRunMatchesMemory's.
			if d.Remaining < limit/2-64 || d.Remaining > limit/2+64 {
				t.Errorf("after half the log aged out: %+v, want Remaining within 64 of %d", d, limit/2)
			}
		})
	}
}
