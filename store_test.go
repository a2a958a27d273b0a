package floodgate

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStoreIsBounded(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(1), clk, WithMaxKeys(64), WithShards(4))
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		_, err := b.Allow(ctx, fmt.Sprintf("key-%d", i))
		require.NoError(t, err)
		require.LessOrEqual(t, b.Stats().Keys, 64)
	}
	st := b.Stats()
	assert.Equal(t, 64, st.Keys)
	assert.Equal(t, 64, st.MaxKeys)
	assert.Equal(t, uint64(1000-64), st.EvictedIdle+st.EvictedLive)
}

// TestStoreDropsFreshEntriesFirst: a limited client survives a spray of
// new keys as long as idle (full) entries can be dropped instead, even
// when it is the least recently used entry; once only live entries are
// left, the one that would have become fresh soonest goes and is counted.
func TestStoreDropsFreshEntriesFirst(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(1), clk, WithMaxKeys(8), WithShards(1))
	ctx := context.Background()
	allow := func(key string, n int) Decision {
		t.Helper()
		d, err := b.AllowN(ctx, key, n)
		require.NoError(t, err)
		return d
	}

	for i := 0; i < 7; i++ {
		require.True(t, allow(fmt.Sprintf("idle-%d", i), 1).Allowed)
	}
	clk.Advance(59 * time.Second)
	require.True(t, allow("victim", 1).Allowed) // limited until +1m59s
	clk.Advance(time.Second)
	for i := 0; i < 7; i++ {
		// Full again; touching them makes them more recent than victim.
		require.Equal(t, 1, allow(fmt.Sprintf("idle-%d", i), 0).Remaining)
	}
	require.Equal(t, Stats{Keys: 8, MaxKeys: 8}, b.Stats())

	for i := 0; i < 7; i++ {
		require.True(t, allow(fmt.Sprintf("spray-%d", i), 1).Allowed)
	}
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, EvictedIdle: 7}, b.Stats())
	d := allow("victim", 1)
	assert.False(t, d.Allowed, "the limited client must survive while idle entries exist")
	assert.Equal(t, 59*time.Second, d.RetryAfter)

	// Only live entries now, all equally costly to drop: the least
	// recently used one goes (victim was just used).
	require.True(t, allow("spray-7", 1).Allowed)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, EvictedIdle: 7, EvictedLive: 1}, b.Stats())
	// spray-0 was dropped, but its debt was remembered: it comes back as
	// limited as it left.
	d = allow("spray-0", 1)
	assert.False(t, d.Allowed, "a live eviction must not reset the limit")
	assert.Equal(t, time.Minute, d.RetryAfter)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, EvictedIdle: 7, EvictedLive: 2, Restored: 1}, b.Stats())
	// The second live eviction probed victim (fresh at +1m59s) among the
	// sprays (fresh at +2m): the smallest loss went, and came back.
	d = allow("victim", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 59*time.Second, d.RetryAfter)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, EvictedIdle: 7, EvictedLive: 3, Restored: 2}, b.Stats())
}

// TestStoreDropsSmallestLoss: when every probed entry is live, the one that
// would have become fresh soonest is dropped. Its debt comes back with it,
// unless the limiter forgets evicted keys.
func TestStoreDropsSmallestLoss(t *testing.T) {
	for _, forget := range []bool{false, true} {
		t.Run(fmt.Sprintf("forget=%v", forget), func(t *testing.T) {
			clk := newTBClock()
			opts := []Option{WithBurst(4), WithMaxKeys(4), WithShards(1)}
			if forget {
				opts = append(opts, WithForgetEvicted())
			}
			b := newTestBucket(t, PerMinute(1), clk, opts...)
			ctx := context.Background()
			for _, k := range []struct {
				key string
				n   int
			}{{"a", 4}, {"b", 1}, {"c", 3}, {"d", 2}, {"e", 1}} {
				d, err := b.AllowN(ctx, k.key, k.n)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			assert.Equal(t, Stats{Keys: 4, MaxKeys: 4, EvictedLive: 1}, b.Stats())
			wantB := 3 // b spent 1 of 4
			if forget {
				wantB = 4
			}
			for key, want := range map[string]int{"a": 0, "b": wantB, "c": 1, "d": 2, "e": 3} {
				d, err := b.AllowN(ctx, key, 0)
				require.NoError(t, err)
				assert.Equal(t, want, d.Remaining, "key %s", key)
			}
			// Peeks insert nothing, so nothing was restored.
			assert.Equal(t, Stats{Keys: 4, MaxKeys: 4, EvictedLive: 1}, b.Stats())
		})
	}
}

func TestStoreIntervalFreshness(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(2), clk, WithIntervalRefill(), WithMaxKeys(2), WithShards(1))
	ctx := context.Background()
	_, err := b.AllowN(ctx, "a", 1)
	require.NoError(t, err)
	_, err = b.AllowN(ctx, "b", 2) // limited for a minute
	require.NoError(t, err)
	clk.Advance(time.Minute)
	_, err = b.AllowN(ctx, "b", 0) // refilled, and now the most recent
	require.NoError(t, err)
	_, err = b.AllowN(ctx, "c", 1)
	require.NoError(t, err)
	assert.Equal(t, Stats{Keys: 2, MaxKeys: 2, EvictedIdle: 1}, b.Stats())
}

func TestStoreKeyTooLong(t *testing.T) {
	b, err := NewTokenBucket(PerMinute(1), WithMaxKeyLength(8))
	require.NoError(t, err)
	ctx := context.Background()
	long := strings.Repeat("x", 9)
	_, err = b.Allow(ctx, long)
	require.ErrorIs(t, err, ErrKeyTooLong)
	_, err = b.AllowN(ctx, long, 0)
	require.ErrorIs(t, err, ErrKeyTooLong)
	require.ErrorIs(t, b.Reset(ctx, long), ErrKeyTooLong)
	require.ErrorIs(t, b.RefundN(ctx, long, 1), ErrKeyTooLong)
	assert.Equal(t, 0, b.Stats().Keys)
	d, err := b.Allow(ctx, long[:8])
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	b, err = NewTokenBucket(PerMinute(1))
	require.NoError(t, err)
	_, err = b.Allow(ctx, strings.Repeat("x", DefaultMaxKeyLength))
	require.NoError(t, err)
	_, err = b.Allow(ctx, strings.Repeat("x", DefaultMaxKeyLength+1))
	require.ErrorIs(t, err, ErrKeyTooLong)
}

// TestStoreHoldsClockStepsBack: an injected clock that goes back neither
// releases a limited client nor blocks an idle one.
func TestStoreHoldsClockStepsBack(t *testing.T) {
	clk := newTBClock()
	start := clk.Now()
	b := newTestBucket(t, PerSecond(1), clk, WithBurst(1), WithShards(1))
	ctx := context.Background()
	allow := func(key string) Decision {
		t.Helper()
		d, err := b.Allow(ctx, key)
		require.NoError(t, err)
		return d
	}
	require.True(t, allow("idle").Allowed) // full again at +1s
	clk.Set(start.Add(10 * time.Second))
	require.True(t, allow("limited").Allowed) // limited until +11s

	clk.Set(start.Add(500 * time.Millisecond)) // back 9.5s
	d := allow("limited")
	assert.False(t, d.Allowed, "going back must not release a limited client")
	assert.Equal(t, time.Second, d.RetryAfter, "time is held at +10s")
	assert.True(t, allow("idle").Allowed, "going back must not block an idle client")

	clk.Set(start.Add(11 * time.Second))
	assert.True(t, allow("limited").Allowed)
}

func TestStoreShardsDistribute(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(1), clk, WithMaxKeys(1<<14), WithShards(16))
	ctx := context.Background()
	const keys = 4800
	for i := 0; i < keys; i++ {
		_, err := b.Allow(ctx, fmt.Sprintf("203.0.113.%d:%d", i%256, i))
		require.NoError(t, err)
	}
	require.Len(t, b.store.shards, 16)
	total := 0
	for i := range b.store.shards {
		n := b.store.shards[i].lru.Len()
		total += n
		// 300 expected per shard; the bounds are > 7 standard deviations.
		assert.InDelta(t, keys/16, n, 130, "shard %d", i)
	}
	assert.Equal(t, keys, total)
	assert.Equal(t, Stats{Keys: keys, MaxKeys: 1 << 14}, b.Stats())
}

func TestDefaultShards(t *testing.T) {
	for _, tc := range []struct{ maxKeys, want int }{
		{1, 1}, {127, 1}, {128, 2}, {2048, 32}, {4096, 64}, {DefaultMaxKeys, 64},
	} {
		assert.Equal(t, tc.want, defaultShards(tc.maxKeys), "maxKeys %d", tc.maxKeys)
		b, err := NewTokenBucket(PerMinute(1), WithMaxKeys(tc.maxKeys))
		require.NoError(t, err)
		assert.Equal(t, tc.want, len(b.store.shards))
	}
}

// TestStoreEvictionAllocations: inserting a key into a full shard costs
// the one list entry simplelru allocates for it, whether the victim is
// idle or live (the probing relinks, it does not reallocate), and the
// state of the dropped entry is reused.
func TestStoreEvictionAllocations(t *testing.T) {
	ctx := context.Background()
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprintf("live=%v", live), func(t *testing.T) {
			clk := newTBClock()
			b := newTestBucket(t, PerHour(1), clk, WithMaxKeys(256), WithShards(1))
			keys := make([]string, 256+2000)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			for _, k := range keys[:256] {
				_, err := b.Allow(ctx, k)
				require.NoError(t, err)
			}
			if !live {
				clk.Advance(time.Hour) // every entry is full again
			}
			i := 256
			allocs := testing.AllocsPerRun(1000, func() {
				n := 0
				if live {
					n = 1
				}
				if !live {
					// A peek creates nothing: insert with a take, then
					// let the new key age out before the next run.
					n = 1
					clk.Advance(time.Hour)
				}
				if _, err := b.AllowN(ctx, keys[i], n); err != nil {
					panic(err)
				}
				i++
			})
			assert.LessOrEqual(t, allocs, 1.0)
			st := b.Stats()
			if live {
				assert.Positive(t, st.EvictedLive)
			} else {
				assert.Zero(t, st.EvictedLive)
				assert.Positive(t, st.EvictedIdle)
			}
		})
	}
}

// TestDebtsBucket walks one bucket through its cases: own entries, a
// shared overflow bound that only grows, entries freed when their debt
// has run out, and forget.
func TestDebtsBucket(t *testing.T) {
	d := newDebts(2) // one bucket
	require.Len(t, d.buckets, 1)
	h := func(fp uint64) uint64 { return fp << 48 }
	for fp := uint64(1); fp <= 4; fp++ {
		d.record(h(fp), int64(fp*100), 0)
	}
	assert.Equal(t, int64(100), d.lookup(h(1), 0))
	assert.Equal(t, int64(400), d.lookup(h(4), 0))
	assert.Equal(t, int64(0), d.lookup(h(5), 0), "an unknown key owes nothing while nothing overflowed")
	d.record(h(2), 250, 0) // the same key again: one entry, the later bound
	assert.Equal(t, int64(250), d.lookup(h(2), 0))
	assert.Zero(t, d.merged)

	d.record(h(5), 50, 0) // full, and the smallest: into the overflow bound
	assert.Equal(t, uint64(1), d.merged)
	assert.Equal(t, int64(50), d.lookup(h(9), 0), "every key of the bucket now owes the shared bound")
	assert.Equal(t, int64(50), d.lookup(h(5), 0))
	d.record(h(6), 500, 0) // displaces the smallest entry (fp 1 at 100)
	assert.Equal(t, uint64(2), d.merged)
	assert.Equal(t, int64(100), d.lookup(h(1), 0), "a displaced debt is kept by the bound")
	assert.Equal(t, int64(500), d.lookup(h(6), 0))

	// At 260 the entries of fp 2 (250) and the bound (100) have run out.
	assert.LessOrEqual(t, d.lookup(h(9), 260), int64(260))
	d.record(h(7), 600, 260) // takes a free entry
	assert.Equal(t, uint64(2), d.merged)
	assert.Equal(t, int64(600), d.lookup(h(7), 260))
	assert.Equal(t, int64(400), d.lookup(h(4), 260))

	assert.False(t, d.forget(h(4), 260))
	assert.LessOrEqual(t, d.lookup(h(4), 260), int64(260))
	d.record(h(8), 700, 260)
	d.record(h(10), 800, 260)
	d.record(h(11), 900, 260) // overflows: the bound is now 500 or more
	assert.True(t, d.forget(h(6), 260), "a key still bound by the overflow cannot be forgotten")

	// Past the latest debt, lookups are skipped.
	assert.Equal(t, int64(1000), d.lookup(h(11), 1000))
}

// TestStoreResetForgetsEvictedDebt: Reset gives an evicted key its quota
// back even though its debt was remembered.
func TestStoreResetForgetsEvictedDebt(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(1), clk, WithMaxKeys(1), WithShards(1))
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		d, err := b.Allow(ctx, k)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := b.AllowN(ctx, "a", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, d.Remaining, "a peek at the evicted key reports its debt")
	require.NoError(t, b.Reset(ctx, "a"))
	d, err = b.Allow(ctx, "a")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "Reset must clear a remembered debt")
	assert.Equal(t, Stats{Keys: 1, MaxKeys: 1, EvictedLive: 2}, b.Stats())
}

// TestRestoreDominates checks what the debt memory relies on, for every
// algorithm: the state restore(at) builds becomes fresh at at, and at no
// time from now on does it leave more room than any state that becomes
// fresh by at. Random histories give the states; the key's own freshAt
// is the at it would be remembered with.
func TestRestoreDominates(t *testing.T) {
	type probe func(now int64, n int) (allowed bool, remaining int)
	type kind struct {
		name string
		// run plays a random history, then returns the key's freshAt,
		// the freshAt of the restored state, probes on copies of the
		// real and the restored state, and the capacity.
		run func(rng *rand.Rand) (now, at, restoredAt int64, real, restored probe, capacity int)
	}
	history := func(rng *rand.Rand, l Limiter, clk *slClock, period time.Duration, capacity int) int64 {
		var now time.Duration
		for i := 0; i < 12; i++ {
			now += time.Duration(rng.Int63n(int64(period) / 3))
			clk.set(now)
			mustAllowN(t, l, "k", 1+rng.Intn(capacity))
		}
		return int64(now)
	}
	tbKind := func(name string, r Rate, opts ...Option) kind {
		return kind{name, func(rng *rand.Rand) (int64, int64, int64, probe, probe, int) {
			clk := newSlClock()
			b, err := NewTokenBucket(r, append(opts, WithClock(clk.now))...)
			require.NoError(t, err)
			now := history(rng, b, clk, r.Period, b.burst)
			k, _ := b.store.acquire("k", false)
			real := *k.st
			k.sh.mu.Unlock()
			at := b.store.freshAt(&real)
			var restored tbState
			b.restore(&restored, at)
			p := func(st0 tbState) probe {
				return func(now int64, n int) (bool, int) {
					st := st0 // each probe on the state as it was
					var d Decision
					if b.interval {
						b.decideInterval(&d, &st, now, n)
					} else {
						b.decideGreedy(&d, &st, now, n)
					}
					return d.Allowed, d.Remaining
				}
			}
			return now, at, b.store.freshAt(&restored), p(real), p(restored), b.burst
		}}
	}
	kinds := []kind{
		tbKind("TokenBucket/exact", Rate{10, time.Second}),
		tbKind("TokenBucket/fraction", Rate{7, 10 * time.Second}, WithBurst(12)),
		tbKind("TokenBucket/interval", Rate{10, time.Minute}, WithIntervalRefill(), WithBurst(15)),
		{"SlidingCounter", func(rng *rand.Rand) (int64, int64, int64, probe, probe, int) {
			clk := newSlClock()
			r := Rate{5, 10 * time.Second}
			sc, err := NewSlidingCounter(r, WithClock(clk.now))
			require.NoError(t, err)
			now := history(rng, sc, clk, r.Period, r.Limit)
			k, _ := sc.store.acquire("k", false)
			real := *k.st
			k.sh.mu.Unlock()
			at := sc.freshAt(&real)
			var restored scState
			sc.restore(&restored, at)
			p := func(st0 scState) probe {
				return func(now int64, n int) (bool, int) {
					st := st0 // each probe on the state as it was
					var d Decision
					sc.decide(&d, &st, now, n)
					return d.Allowed, d.Remaining
				}
			}
			return now, at, sc.freshAt(&restored), p(real), p(restored), r.Limit
		}},
		{"SlidingLog", func(rng *rand.Rand) (int64, int64, int64, probe, probe, int) {
			clk := newSlClock()
			r := Rate{5, 10 * time.Second}
			l, err := NewSlidingLog(r, WithClock(clk.now))
			require.NoError(t, err)
			now := history(rng, l, clk, r.Period, r.Limit)
			k, _ := l.store.acquire("k", false)
			real := *k.st
			real.ring = append([]slEntry(nil), real.ring...)
			k.sh.mu.Unlock()
			at := l.freshAt(&real)
			var restored slState
			l.restore(&restored, at)
			p := func(st slState) probe {
				return func(now int64, n int) (bool, int) {
					st := st
					st.ring = append([]slEntry(nil), st.ring...)
					var d Decision
					l.decide(&d, &st, now, n)
					return d.Allowed, d.Remaining
				}
			}
			return now, at, l.freshAt(&restored), p(real), p(restored), r.Limit
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			checked := 0
			for trial := 0; trial < 300; trial++ {
				now, at, restoredAt, real, restored, capacity := k.run(rng)
				if at <= now {
					continue // fresh already: nothing would be remembered
				}
				checked++
				require.Equal(t, at, restoredAt, "trial %d: the restored state must be fresh exactly at at", trial)
				for t0 := now; t0 <= at+1; t0 += 1 + rng.Int63n((at-now)/8+1) {
					for n := 0; n <= capacity; n++ {
						ra, rr := real(t0, n)
						sa, sr := restored(t0, n)
						// Remaining is compared on reports (n == 0): after
						// an allowed n > 0 it counts the units just taken.
						if sa && !ra || n == 0 && sr > rr {
							t.Fatalf("trial %d at %d (fresh at %d), n=%d: restored allowed %v remaining %d, real allowed %v remaining %d",
								trial, t0, at, n, sa, sr, ra, rr)
						}
					}
				}
			}
			require.Greater(t, checked, 100)
		})
	}
}
