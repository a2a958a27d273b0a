package redisstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestKeysExpire checks, on the server's clock, that each algorithm's key
// is where the key layout says (one key per client) and expire when their state equals a fresh
// one: PTTL is the time until then, rounded up to a millisecond (less the
// few milliseconds the test itself takes). A report (n == 0) and a denied
// request write nothing.
func TestKeysExpire(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	rate := floodgate.Rate{Limit: 10, Period: time.Minute}
	const slack = 500 * time.Millisecond

	pttl := func(t *testing.T, key string, want time.Duration) {
		t.Helper()
		got, err := rdb.PTTL(ctx, key).Result()
		if err != nil || got > want || got < want-slack {
			t.Errorf("PTTL %s = %v (%v), want within %v below %v", key, got, err, slack, want)
		}
	}
	absent := func(t *testing.T, keys ...string) {
		t.Helper()
		if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != 0 {
			t.Errorf("%v: %d exist (%v), want none", keys, n, err)
		}
	}

	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			// "a{b}" also checks the escaping of braces in the stored name.
			tag := p + ":{a%7Bb%7D}:"

			tb, _ := redisstore.NewTokenBucket(c.s, rate, patient, redisstore.WithPrefix(p))
			mustAllowed(t, tb, "a{b}", 0, true)
			absent(t, tag+"tb")
			mustAllowed(t, tb, "a{b}", 1, true)
			pttl(t, tag+"tb", 6*time.Second) // one token back in Period/Limit
			mustAllowed(t, tb, "a{b}", 9, true)
			pttl(t, tag+"tb", time.Minute)
			mustAllowed(t, tb, "a{b}", 1, false)
			pttl(t, tag+"tb", time.Minute)
			if err := tb.RefundN(ctx, "a{b}", 5); err != nil {
				t.Fatal(err)
			}
			pttl(t, tag+"tb", 30*time.Second)
			if err := tb.RefundN(ctx, "a{b}", 5); err != nil {
				t.Fatal(err)
			}
			absent(t, tag+"tb") // full again: nothing to keep

			sl, _ := redisstore.NewSlidingLog(c.s, rate, patient, redisstore.WithPrefix(p))
			mustAllowed(t, sl, "a{b}", 0, true)
			absent(t, tag+"log")
			mustAllowed(t, sl, "a{b}", 7, true)
			mustAllowed(t, sl, "a{b}", 3, true)
			pttl(t, tag+"log", time.Minute)
			// One member per decision, named by the running total of the
			// units, whatever n; and "low", the total before the oldest unit
			// counted, scored -1 - low.
			if m, _ := rdb.ZRangeWithScores(ctx, tag+"log", 0, -1).Result(); len(m) != 3 ||
				m[0].Member != "low" || m[0].Score != -1 || m[1].Member != "7" || m[2].Member != "10" || m[1].Score >= m[2].Score {
				t.Errorf("log after AllowN 7 and 3: %v, want [low -1] [7 t1] [10 t2] with t1 < t2", m)
			}
			mustAllowed(t, sl, "a{b}", 1, false)
			if n, _ := rdb.ZCard(ctx, tag+"log").Result(); n != 3 {
				t.Errorf("log holds %d members after a denial, want 3: denials are not recorded", n)
			}
			if err := sl.RefundN(ctx, "a{b}", 4); err != nil {
				t.Fatal(err)
			}
			if m, _ := rdb.ZRange(ctx, tag+"log", 0, -1).Result(); !slices.Equal(m, []string{"low", "6"}) {
				t.Errorf("log members after refunding 4 of 7+3: %q, want [low 6]", m)
			}
			if err := sl.RefundN(ctx, "a{b}", 6); err != nil {
				t.Fatal(err)
			}
			absent(t, tag+"log") // empty again

			sc, _ := redisstore.NewSlidingCounter(c.s, rate, patient, redisstore.WithPrefix(p))
			mustAllowed(t, sc, "a{b}", 0, true)
			absent(t, tag+"sc")
			mustAllowed(t, sc, "a{b}", 3, true)
			// The current window's count weighs until the next window ends:
			// between one and two periods from now.
			got, err := rdb.PTTL(ctx, tag+"sc").Result()
			if err != nil || got <= rate.Period-slack || got > 2*rate.Period {
				t.Errorf("PTTL sc = %v (%v), want in (%v, %v]", got, err, rate.Period, 2*rate.Period)
			}
			if v, _ := rdb.Get(ctx, tag+"sc").Result(); !strings.HasSuffix(v, " 0 3") {
				t.Errorf("counter %q, want \"w 0 3\"", v)
			}

			for _, l := range []limiter{tb, sl, sc} {
				if err := l.Reset(ctx, "a{b}"); err != nil {
					t.Fatal(err)
				}
			}
			absent(t, tag+"tb", tag+"log", tag+"sc")
		})
	}
}

// TestNoScriptFallback: after SCRIPT FLUSH (as after a restart or a
// failover) a decision loads its script with EVAL and goes on.
func TestNoScriptFallback(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		for _, a := range algos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				l := a.mustNew(t, c.s, floodgate.PerMinute(2), patient, redisstore.WithPrefix(prefix(t)))
				mustAllowed(t, l, "k", 1, true)
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				mustAllowed(t, l, "k", 1, true)
				mustAllowed(t, l, "k", 1, false)
			})
		}
	}
}

// mustAllowed requires AllowN to succeed with the given answer.
func mustAllowed(t *testing.T, l floodgate.Limiter, key string, n int, allowed bool) floodgate.Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, n)
	if err != nil || d.Allowed != allowed {
		t.Fatalf("AllowN(%q, %d) = %+v, %v; want Allowed %v", key, n, d, err, allowed)
	}
	return d
}

// TestIntervalBucketKey: an intervally refilled bucket keeps its state in
// p:{k}:tbi, never in the greedy bucket's key, expiring when the bucket is
// full again (the end of its period); a refund to full and Reset delete it.
func TestIntervalBucketKey(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			b, err := redisstore.NewTokenBucket(c.s, floodgate.PerMinute(10), patient, redisstore.WithPrefix(p), redisstore.WithIntervalRefill())
			if err != nil {
				t.Fatal(err)
			}
			mustAllowed(t, b, "k", 4, true)
			got, err := rdb.PTTL(ctx, p+":{k}:tbi").Result()
			if err != nil || got > time.Minute || got < time.Minute-500*time.Millisecond {
				t.Errorf("PTTL tbi = %v (%v), want the end of the period, 1m", got, err)
			}
			if n, _ := rdb.Exists(ctx, p+":{k}:tb").Result(); n != 0 {
				t.Errorf("the greedy key exists")
			}
			d := mustAllowed(t, b, "k", 7, false)
			if d.Remaining != 6 || d.RetryAfter <= 59*time.Second || d.RetryAfter > time.Minute {
				t.Errorf("AllowN(7) after 4 of 10: %+v, want Remaining 6 and the period's end", d)
			}
			if err := b.RefundN(ctx, "k", 4); err != nil {
				t.Fatal(err)
			}
			if n, _ := rdb.Exists(ctx, p+":{k}:tbi").Result(); n != 0 {
				t.Errorf("a full interval bucket's key still exists")
			}
			mustAllowed(t, b, "k", 1, true)
			if err := b.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if n, _ := rdb.Exists(ctx, p+":{k}:tbi").Result(); n != 0 {
				t.Errorf("Reset left the interval bucket's key")
			}
		})
	}
}
