package floodgate

import (
	"context"
	"fmt"
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
	assert.True(t, allow("spray-0", 1).Allowed, "a live eviction resets the limit")
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, EvictedIdle: 7, EvictedLive: 2}, b.Stats())
	// The second live eviction probed victim (fresh at +1m59s) among the
	// sprays (fresh at +2m): the smallest loss went.
	assert.True(t, allow("victim", 1).Allowed)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, EvictedIdle: 7, EvictedLive: 3}, b.Stats())
}

// TestStoreDropsSmallestLoss: when every probed entry is live, the one that
// would have become fresh soonest is dropped.
func TestStoreDropsSmallestLoss(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerMinute(1), clk, WithBurst(4), WithMaxKeys(4), WithShards(1))
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
	for key, want := range map[string]int{"a": 0, "b": 4, "c": 1, "d": 2, "e": 3} {
		d, err := b.AllowN(ctx, key, 0)
		require.NoError(t, err)
		assert.Equal(t, want, d.Remaining, "key %s", key)
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
