package floodgate

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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
	assert.Equal(t, debtCapacity(64, 4), st.DebtCapacity)
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
	require.Equal(t, Stats{Keys: 8, MaxKeys: 8, DebtCapacity: debtCapacity(8, 1)}, b.Stats())

	for i := 0; i < 7; i++ {
		require.True(t, allow(fmt.Sprintf("spray-%d", i), 1).Allowed)
	}
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, DebtCapacity: debtCapacity(8, 1), EvictedIdle: 7}, b.Stats())
	d := allow("victim", 1)
	assert.False(t, d.Allowed, "the limited client must survive while idle entries exist")
	assert.Equal(t, 59*time.Second, d.RetryAfter)

	// Only live entries now: one of the sprays goes (unmarked, while
	// victim was just used).
	require.True(t, allow("spray-7", 1).Allowed)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, DebtCapacity: debtCapacity(8, 1), EvictedIdle: 7, EvictedLive: 1}, b.Stats())
	// Whichever was dropped, its debt was remembered: every spray comes
	// back, or stays, as limited as it left.
	for i := 0; i < 8; i++ {
		d = allow(fmt.Sprintf("spray-%d", i), 1)
		assert.False(t, d.Allowed, "spray-%d: a live eviction must not reset the limit", i)
		assert.Equal(t, time.Minute, d.RetryAfter, "spray-%d", i)
	}
	d = allow("victim", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 59*time.Second, d.RetryAfter)
	st := b.Stats()
	assert.Positive(t, st.Restored)
	assert.Equal(t, st.Restored+1, st.EvictedLive, "each key that came back took a live key's place")
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
			want := Stats{Keys: 4, MaxKeys: 4, EvictedLive: 1, DebtCapacity: debtCapacity(4, 1)}
			wantB := 3 // b spent 1 of 4
			if forget {
				want.DebtCapacity, want.Forgotten = 0, 1
				wantB = 4
			}
			assert.Equal(t, want, b.Stats())
			for key, want := range map[string]int{"a": 0, "b": wantB, "c": 1, "d": 2, "e": 3} {
				d, err := b.AllowN(ctx, key, 0)
				require.NoError(t, err)
				assert.Equal(t, want, d.Remaining, "key %s", key)
			}
			// Peeks insert nothing, so nothing was restored.
			assert.Equal(t, want, b.Stats())
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
	// An interval bucket's debts may be rounded up, as every kind's: the
	// default words.
	assert.Equal(t, Stats{Keys: 2, MaxKeys: 2, EvictedIdle: 1, DebtCapacity: debtCapacity(2, 1)}, b.Stats())
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
		n := b.store.shards[i].keys
		total += n
		// 300 expected per shard; the bounds are > 7 standard deviations.
		assert.InDelta(t, keys/16, n, 130, "shard %d", i)
	}
	assert.Equal(t, keys, total)
	assert.Equal(t, Stats{Keys: keys, MaxKeys: 1 << 14, DebtCapacity: debtCapacity(1<<14, 16)}, b.Stats())
}

func TestDefaultShards(t *testing.T) {
	for _, tc := range []struct{ maxKeys, want int }{
		{1, 1}, {8191, 1}, {8192, 2}, {100_000, 16}, {1 << 18, 64}, {DefaultMaxKeys, 64}, {10_000_000, 64},
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

// debtCapacity is Stats().DebtCapacity by default for maxKeys keys in
// shards shards of equal size.
func debtCapacity(maxKeys, shards int) int {
	return shards * debtBuckets(maxKeys/shards, DefaultDebtsPerKey) * debtWords
}

// roundTrip returns v as the debt memory gives it back from a rounded
// entry written when its base was base (see debts): never less.
func roundTrip(t testing.TB, v debt, base int64) debt {
	t.Helper()
	d := newDebts(1, false, 1)
	d.base = base
	w, ok := d.roundedWord(debtItem{fp: 1 << 12, v: debt{at: v.at, amt: v.amt}})
	require.True(t, ok, "%+v from base %d", v, base)
	r := d.roundedItem(w).v
	require.True(t, r.shared && r.at >= v.at && r.amt >= v.amt, "%+v rounded to %+v", v, r)
	return r
}

// inspect calls f with key's tracked state (nil if the key is not
// tracked) and the store's time, under the shard's lock.
func (s *store[S, A]) inspect(t testing.TB, key string, f func(st *S, now int64)) {
	t.Helper()
	h, err := s.hash(key)
	if err != nil {
		t.Fatal(err)
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	var st *S
	if b, i := sh.locate(h); b != nil {
		defer b.mu.Unlock()
		st, now = &b.slots[i].st, s.clock.inside(now)
	}
	f(st, now)
}

// TestDebtsTable walks the debt memory through its cases on a table of
// two buckets (sixteen words): own entries kept exactly and replaced, not
// merged, while they fit two words each; entries moved between buckets to
// make room; debts rounded up into one word each under pressure, never
// down, and a rounded entry never lowered; a full table merging the debt
// that ends soonest into a shared bound that binds strangers but not
// keys with entries of their own; a shield that keeps a key free of that
// bound; entries freed when they run out; and the forgetting variant.
func TestDebtsTable(t *testing.T) {
	keys := func(n int) []uint64 { // distinct hashes
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = uint64(i+1)*0x9e3779b97f4a7c15 | 3
		}
		return hs
	}
	owed := func(d *debts, h uint64, now int64) debt { return d.find(h, now).owed(now) }
	// The coarsest rounding of the times below (within 10 s of the base).
	tick := int64(1) << (bits.Len64(uint64(10*time.Second)) - rtQBits + 1)
	const s = int64(time.Second)

	t.Run("exact and replaced", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(8)
		for i, h := range hs {
			d.put(h, debt{at: int64(100 + i), amt: uint32(i + 1)}, 0)
		}
		for i, h := range hs {
			assert.Equal(t, debt{at: int64(100 + i), amt: uint32(i + 1)}, owed(d, h, 0), "key %d", i)
		}
		assert.Zero(t, d.merged, "eight debts fit eight exact entries: they move to make room")
		d.put(hs[3], debt{at: 50, amt: 1}, 0) // a later, smaller state of the same key replaces its entry
		assert.Equal(t, debt{at: 50, amt: 1}, owed(d, hs[3], 0))
		d.put(hs[3], debt{}, 0) // owes nothing: the entry is freed
		assert.Equal(t, debt{}, owed(d, hs[3], 0))
		assert.Equal(t, debt{}, owed(d, keys(9)[8], 0), "a stranger owes nothing while nothing overflowed")
	})

	t.Run("rounded under pressure", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(17)
		for i, h := range hs[:16] {
			d.put(h, debt{at: s + int64(i)*1_000_003, amt: uint32(1000 + 97*i)}, 0)
		}
		assert.Zero(t, d.merged, "sixteen debts fit sixteen words")
		for i, h := range hs[:16] {
			want := debt{at: s + int64(i)*1_000_003, amt: uint32(1000 + 97*i)}
			v := owed(d, h, 0)
			require.True(t, v.shared, "key %d: sixteen debts in sixteen words are all rounded: %+v", i, v)
			require.GreaterOrEqual(t, v.at, want.at, "key %d: rounded down", i)
			require.Less(t, v.at, want.at+tick, "key %d: rounded up by a tick or more", i)
			require.GreaterOrEqual(t, v.amt, want.amt, "key %d: amount rounded down", i)
			require.LessOrEqual(t, v.amt-want.amt, want.amt>>rAmtMant, "key %d: amount rounded up by more than 2^-10", i)
		}
		assert.Equal(t, debt{}, owed(d, hs[16], 0), "a stranger owes nothing while nothing overflowed")

		// A rounded entry is raised, never lowered: a smaller debt of its
		// key (a refund) or one that owes nothing (the key tracked again)
		// leaves it; a larger one raises it.
		before := owed(d, hs[5], 0)
		d.put(hs[5], debt{at: s, amt: 1}, 0)
		d.put(hs[5], debt{}, 0)
		assert.Equal(t, before, owed(d, hs[5], 0))
		d.put(hs[5], debt{at: 3 * s, amt: 1}, 0)
		v := owed(d, hs[5], 0)
		assert.True(t, v.at >= 3*s && v.amt >= before.amt, "raised to %+v", v)
		// Reset frees it, for good.
		d.reset(hs[5], 0)
		assert.Equal(t, debt{}, owed(d, hs[5], 0))
		assert.Equal(t, debt{}, owed(d, hs[5], 2*s))
		assert.Zero(t, d.merged)
	})

	t.Run("rounding stays close as time goes on", func(t *testing.T) {
		// The base follows the writes, so that a debt written long after
		// the first is rounded by its own remaining time and a second,
		// not by the table's age; and moving the base leaves a rounded
		// time as it was.
		d := newDebts(1, false, 1)
		now := int64(0)
		for i := range 40 {
			now += 37 * s
			d.rebase(now)
			want := debt{at: now + 5*s, amt: 3}
			w, ok := d.roundedWord(debtItem{fp: 1 << 12, v: want})
			require.True(t, ok)
			v := d.roundedItem(w).v
			require.GreaterOrEqual(t, v.at, want.at, "write %d", i)
			require.Less(t, v.at-want.at, int64(1)<<(bits.Len64(uint64(6*s))-rtQBits+1), "write %d: rounded by %d ns", i, v.at-want.at)
		}
		d = newDebts(1, false, 1)
		d.rebase(0)
		w, ok := d.roundedWord(debtItem{fp: 1 << 12, v: debt{at: 1000*s + 12345, amt: 3}})
		require.True(t, ok)
		d.buckets[0][1] = w
		at := d.roundedAt(w)
		for now := int64(0); now < 999*s; now += 2 * s {
			d.rebase(now)
			require.Equal(t, at, d.roundedAt(d.buckets[0][1]), "after moving the base to %d", now)
		}
	})

	t.Run("overflow merges the soonest", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(20)
		for i, h := range hs[:16] {
			d.put(h, debt{at: s + int64(i)*s/10, amt: 5}, 0)
		}
		require.Zero(t, d.merged)
		d.put(hs[16], debt{at: 5 * s, amt: 7}, 0) // no room anywhere: the soonest debts merge
		require.Positive(t, d.merged)
		v := owed(d, hs[16], 0)
		assert.True(t, v.at >= 5*s && v.at < 5*s+tick && v.amt == 7, "the newcomer ends last: it keeps an entry: %+v", v)
		stranger, bound := uint64(0), 0
		for _, h := range keys(60)[20:] {
			if got := owed(d, h, 0); got.owes(0) {
				assert.Less(t, got.at, s+16*s/10, "the bound is the soonest debts' maximum")
				stranger = h
				bound++
			}
		}
		require.Positive(t, bound, "a stranger of a bucket with a bound starts from it")
		kept := 0
		for i, h := range hs[:16] {
			want := debt{at: s + int64(i)*s/10, amt: 5}
			v := owed(d, h, 0)
			require.GreaterOrEqual(t, v.at, want.at, "key %d: a debt is never lowered", i)
			require.GreaterOrEqual(t, v.amt, want.amt, "key %d", i)
			if v.at < want.at+tick && v.amt == want.amt {
				kept++
			}
		}
		assert.GreaterOrEqual(t, kept, 16-int(d.merged), "keys with entries of their own owe their debt")

		// A shield frees a key from the bound, until the bound ends.
		d.put(stranger, debt{}, 0)
		assert.Equal(t, debt{}, owed(d, stranger, 0))
		// Everything ends by 6 s: entries and bounds are free again.
		assert.Equal(t, debt{}, owed(d, stranger, 6*s))
		d.put(hs[17], debt{at: 9 * s, amt: 1}, 6*s)
		assert.Equal(t, debt{at: 9 * s, amt: 1}, owed(d, hs[17], 6*s))
	})

	// Issue 29, item 13: a reset key keeps its shield through any number
	// of debts that overflow its buckets, and no debt is forgotten to
	// keep a shield.
	t.Run("shields and debts", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(60)
		d.put(hs[0], debt{at: 10 * s, amt: 5}, 0) // the memory holds a running debt
		for _, h := range hs[1:4] {
			d.reset(h, 0) // reset keys that had no entry: shielded all the same
		}
		for i, h := range hs[4:] {
			d.put(h, debt{at: 2*s + int64(i), amt: 5}, 0)
		}
		require.Positive(t, d.merged)
		for i, h := range hs[1:4] {
			assert.Equal(t, debt{}, owed(d, h, 0), "reset key %d was bound again by the debts that came after", i)
			assert.Equal(t, debt{}, owed(d, h, 10*s-1), "reset key %d, until the last debt that was running at the reset ends", i)
		}
		for i, h := range append(hs[:1:1], hs[4:]...) {
			v := owed(d, h, 0)
			assert.True(t, v.owes(0) && v.amt >= 5, "debt %d was forgotten: %+v", i, v)
		}
		assert.Zero(t, d.forgotten)

		// A table of nothing but shields still forgets no debt: one
		// shield gives way.
		d = newDebts(2, false, 1)
		d.put(hs[0], debt{at: 10 * s, amt: 5}, 0)
		for _, h := range hs[:16] {
			d.reset(h, 0)
		}
		shields := func() int {
			n := 0
			for b := range d.buckets {
				d.entries(&d.buckets[b], func(_ int, it debtItem) {
					if it.marker() {
						n++
					}
				})
			}
			return n
		}
		require.Equal(t, 16, shields(), "sixteen shields in sixteen words")
		d.put(hs[16], debt{at: 3 * s, amt: 2}, 0)
		v := owed(d, hs[16], 0)
		assert.True(t, v.at >= 3*s && v.amt >= 2, "a debt was dropped to keep the shields: %+v", v)
		assert.Equal(t, 15, shields(), "one shield gives way, and only one")
		assert.Zero(t, d.forgotten)
	})

	t.Run("forget", func(t *testing.T) {
		d := newDebts(2, true, 1)
		hs := keys(18)
		for i, h := range hs[:17] {
			d.put(h, debt{at: s + int64(i)*s/10, amt: 5}, 0)
		}
		assert.Zero(t, d.merged)
		assert.Equal(t, uint64(1), d.forgotten)
		assert.Equal(t, debt{}, owed(d, hs[17], 0), "a stranger never waits")
		free := 0
		for i, h := range hs[:17] {
			want := debt{at: s + int64(i)*s/10, amt: 5}
			switch v := owed(d, h, 0); {
			case v == debt{}:
				free++
			default:
				assert.True(t, v.at >= want.at && v.at < want.at+tick && v.amt == 5, "key %d: %+v", i, v)
			}
		}
		assert.Equal(t, 1, free, "one debt, the soonest of its bucket, was forgotten")
	})
}

// TestStoreHoldsMaxKeys (issue 33): a store sized for its clients,
// WithMaxKeys(N) for N clients, holds every one of them, evicting none,
// whatever the seed; and once they are in, deciding on them allocates
// nothing. Several shards share the bound (see newStore).
func TestStoreHoldsMaxKeys(t *testing.T) {
	ctx := context.Background()
	sizes := []int{1, 8, 34, 100, 1000, 10_000, 100_000}
	if testing.Short() {
		sizes = sizes[:6]
	}
	for _, n := range sizes {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint("client-", i)
		}
		for seed := uint64(1); seed <= 3; seed++ {
			b, err := NewTokenBucket(Rate{Limit: 10, Period: time.Hour}, WithMaxKeys(n), withStoreSeed(seed))
			require.NoError(t, err)
			for _, k := range keys {
				require.True(t, mustAllowN(t, b, k, 1).Allowed)
			}
			require.Equal(t, Stats{Keys: n, MaxKeys: n, DebtCapacity: b.Stats().DebtCapacity}, b.Stats(), "%d keys, seed %d", n, seed)
			i := 0
			allocs := testing.AllocsPerRun(200, func() {
				_, _ = b.Allow(ctx, keys[i%n])
				i++
			})
			assert.Zero(t, allocs, "%d keys: deciding on a tracked key allocates", n)
			assert.Equal(t, n, b.Stats().Keys)
		}
	}
}

// TestStoreHoldsMaxKeysInOneShard (issue 33, goal 4): WithMaxKeys(n)
// holds n keys however they fall over the shards. All 400 keys of a
// 400-key store of 4 shards land in one shard (chosen by their hashes
// under a fixed seed), four times its share and beyond the room its
// table is sized for: it holds every one, evicting none, and the first
// eviction comes with key 401.
func TestStoreHoldsMaxKeysInOneShard(t *testing.T) {
	const n = 400
	clk := newTBClock()
	b := newTestBucket(t, PerHour(10), clk, WithMaxKeys(n), WithShards(4), withStoreSeed(7))
	target := &b.store.shards[0]
	require.Less(t, target.most, n, "the shard's final table is sized for fewer keys")
	var keys []string
	for i := 0; len(keys) < n+1; i++ {
		k := fmt.Sprint("k", i)
		if h, err := b.store.hash(k); err == nil && b.store.shard(h) == target {
			keys = append(keys, k)
		}
	}
	for i, k := range keys[:n] {
		require.True(t, mustAllowN(t, b, k, 3).Allowed, "key %d", i)
	}
	require.Equal(t, Stats{Keys: n, MaxKeys: n, DebtCapacity: b.Stats().DebtCapacity}, b.Stats())
	for i, k := range keys[:n] {
		require.Equal(t, 7, mustAllowN(t, b, k, 0).Remaining, "key %d kept its state", i)
	}
	require.True(t, mustAllowN(t, b, keys[n], 3).Allowed)
	st := b.Stats()
	assert.Equal(t, n, st.Keys)
	assert.Equal(t, uint64(1), st.EvictedIdle+st.EvictedLive, "key n+1 evicts one")
}

// TestStoreNeverExceedsMaxKeysConcurrently: shards inserting at once
// never take more than MaxKeys places between them. Eight goroutines
// spray distinct keys over 16 shards of a 256-key store: it ends holding
// exactly 256 (each insertion into a full store passes an evicted key's
// place on; a count read and then added to would let two shards take the
// last place, and the excess would stay).
func TestStoreNeverExceedsMaxKeysConcurrently(t *testing.T) {
	const n, goroutines, each = 256, 8, 4000
	b, err := NewTokenBucket(PerHour(10), WithMaxKeys(n), WithShards(16))
	require.NoError(t, err)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, _ = b.Allow(ctx, fmt.Sprint(g, "-", i))
			}
		}()
	}
	wg.Wait()
	st := b.Stats()
	assert.Equal(t, n, st.Keys)
	assert.Equal(t, int64(n), b.store.total.n.Load())
	assert.Equal(t, uint64(goroutines*each-n), st.EvictedIdle+st.EvictedLive)
}

// TestStoreGrowsUnderConcurrentDecisions: while four goroutines decide
// on keys that keep arriving, the table grows from 8 buckets to 4,096,
// moving every key bucket by bucket, and changes of rate convert the
// states under the decisions: no decision is lost or doubled. Each of 20,000
// keys, at 3 an hour on a frozen clock, is asked for 4 units one at a
// time, once by each goroutine: exactly 3 are allowed, never 4.
func TestStoreGrowsUnderConcurrentDecisions(t *testing.T) {
	const keys, goroutines = 20_000, 4
	clk := newTBClock()
	b := newTestBucket(t, PerHour(3), clk, WithMaxKeys(keys), WithShards(1))
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("k", i)
	}
	allowed := make([]atomic.Int32, keys)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < keys; j++ {
				i := (j*(2*g+1) + g*997) % keys // each goroutine its own order
				if d, err := b.Allow(ctx, names[i]); err == nil && d.Allowed {
					allowed[i].Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		// Changes between 3 an hour and 3 every 1,000 hours, which on a
		// frozen clock allow the same 3 units: every state is converted
		// under the decisions, and a decision that read one rate for a
		// state in the other would allow a fourth.
		defer wg.Done()
		for r := 0; r < 21; r++ {
			c := RateChange{Rate: PerHour(3), Inherit: KeepUsed}
			if r%2 == 0 {
				c.Rate.Period = 1000 * time.Hour
			}
			require.NoError(t, b.SetRate(ctx, c))
		}
	}()
	wg.Wait()
	for i := range allowed {
		require.Equal(t, int32(3), allowed[i].Load(), "key %d", i)
	}
	assert.Equal(t, keys, b.Stats().Keys)
	sh := &b.store.shards[0]
	assert.Equal(t, newTable[tbState](sh.final, sh.final, sh.most).nb, sh.tab.Load().nb)
}

// TestGrownOrder: a grown table's pages take the eviction order of the
// old pages their first buckets were in. 24 buckets in pages of 8, in
// the order 2, 0, 1, grow to 36: new pages 0 and 1 start in old page 0,
// page 2 in old page 1, pages 3 and 4 in old page 2.
func TestGrownOrder(t *testing.T) {
	assert.Equal(t, []uint32{3, 4, 0, 1, 2}, grownOrder([]uint32{2, 0, 1}, 24, 36, 3))
	assert.Equal(t, []uint32{0, 1, 2, 3}, grownOrder([]uint32{0, 1}, 16, 32, 3))
}

// TestStoreGrowsAfterEvicting: a shard that has begun evicting, and then
// grows (a shard holding more than its table's share while the store has
// room), keeps every page of the grown table in its eviction order once.
func TestStoreGrowsAfterEvicting(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerHour(10), clk, WithMaxKeys(400), WithShards(4), withStoreSeed(7))
	sh := &b.store.shards[0]
	var mine []string
	for i := 0; len(mine) < 300; i++ {
		k := fmt.Sprint("k", i)
		if h, err := b.store.hash(k); err == nil && b.store.shard(h) == sh {
			mine = append(mine, k)
		}
	}
	// Fill the store with keys of the other shards, then evict once from
	// shard 0 (one key of its own), then free the store and fill shard 0.
	var others []string
	for i := 0; len(others) < 399; i++ {
		k := fmt.Sprint("o", i)
		if h, err := b.store.hash(k); err == nil && b.store.shard(h) != sh {
			others = append(others, k)
		}
	}
	require.True(t, mustAllowN(t, b, mine[0], 1).Allowed)
	for _, k := range others {
		require.True(t, mustAllowN(t, b, k, 1).Allowed)
	}
	require.True(t, mustAllowN(t, b, mine[1], 1).Allowed) // evicts mine[0], idle or not
	require.NotNil(t, sh.ev, "the shard evicted")
	require.NotNil(t, sh.ev.pages, "the shard evicted")
	before := sh.tab.Load().nb
	for _, k := range others {
		require.NoError(t, b.Reset(context.Background(), k))
	}
	for i, k := range mine[2:] {
		require.True(t, mustAllowN(t, b, k, 1).Allowed, "key %d", i)
	}
	tab := sh.tab.Load()
	require.Greater(t, tab.nb, before, "the shard grew after its eviction")
	keys := sh.ev.pages.Keys()
	assert.Len(t, keys, tab.pages(sh.ev.pageShift))
	seen := map[uint32]bool{}
	for _, p := range keys {
		assert.False(t, seen[p], "page %d twice", p)
		assert.Less(t, int(p), tab.pages(sh.ev.pageShift))
		seen[p] = true
	}
	for i, k := range mine[1:] {
		require.Equal(t, 9, mustAllowN(t, b, k, 0).Remaining, "key %d", i)
	}
}

// TestBucketFillsTwoCacheLines: a bucket of token buckets or sliding
// counters is 128 bytes, so that the table's allocation (aligned to a
// page) keeps every bucket on two cache lines of its own.
func TestBucketFillsTwoCacheLines(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(bucket[tbState]{}))
	assert.Equal(t, uintptr(128), unsafe.Sizeof(bucket[scState]{}))
}

// TestShardLines: a shard of token buckets or sliding counters is two
// cache lines, the fields a decision reads (up to final) in its first
// and those an insertion writes (mu to ev) in its second, and in the
// shards' array, whatever their number and however the allocator places
// it, no line holds fields of both kinds, of one shard or of two: an
// insertion never writes a line that a decision on a tracked key reads
// (see shard).
func TestShardLines(t *testing.T) {
	assert.Equal(t, uintptr(2*cacheLine), unsafe.Sizeof(shard[tbState, *tbAlg]{}))
	assert.Equal(t, uintptr(2*cacheLine), unsafe.Sizeof(shard[scState, *scAlg]{}))
	line := func(p unsafe.Pointer) uintptr { return uintptr(p) / cacheLine }
	for n := 1; n <= MaxShards; n *= 2 {
		b, err := NewTokenBucket(PerHour(10), WithMaxKeys(MaxShards), WithShards(n))
		require.NoError(t, err)
		read, written := map[uintptr]int{}, map[uintptr]int{}
		for i := range b.store.shards {
			sh := &b.store.shards[i]
			read[line(unsafe.Pointer(&sh.tab))] = i
			read[line(unsafe.Add(unsafe.Pointer(&sh.final), 7))] = i
			written[line(unsafe.Pointer(&sh.mu))] = i
			written[line(unsafe.Add(unsafe.Pointer(&sh.ev), 7))] = i
		}
		for l, i := range read {
			if j, ok := written[l]; ok {
				t.Errorf("%d shards: a line holds what shard %d's decisions read and shard %d's insertions write", n, i, j)
			}
		}
	}
}

// TestStoreTableGrows: a shard filling up grows its table from two
// buckets, by one bucket at a time up to stepBuckets and by half again
// from there (never doubling: issue 33, a table just grown for its load
// is more than half full), to the size that holds its keys within
// maxLoad; every key stays findable with its state, and no eviction
// order is kept until the first eviction.
func TestStoreTableGrows(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerHour(10), clk, WithMaxKeys(1000), WithShards(1))
	ctx := context.Background()
	sh := &b.store.shards[0]
	var sizes []uint64
	for i := 0; i < 1000; i++ {
		before := sh.tab.Load()
		require.True(t, mustAllowN(t, b, fmt.Sprint("k", i), 1+i%10).Allowed)
		if nb := sh.tab.Load().nb; len(sizes) == 0 || sizes[len(sizes)-1] != nb {
			sizes = append(sizes, nb)
			step := uint64(0)
			if before != nil {
				step = newTable[tbState](nextBuckets(before.nb, sh.final), sh.final, sh.most).nb
			}
			if before != nil && sh.keys > before.full && nb == step {
				// Grown for its load (not for a key that found no
				// room, nor twice for a key that found none in the
				// table grown once: a regrow, some 2 grows in 10,000
				// up to 60 keys), a table is still more than half
				// full.
				assert.Greater(t, float64(sh.keys), 0.5*float64(nb*bucketSlots), "%d keys in %d buckets", sh.keys, nb)
			}
		}
	}
	assert.Equal(t, tableBuckets(1000), sh.final)
	require.Equal(t, newTable[tbState](firstBuckets, sh.final, sh.most).nb, sizes[0])
	for i := 1; i < len(sizes); i++ {
		// A step is half again, or up to the allocation's size class
		// (two steps if a key found no room in the first: see regrow).
		step := newTable[tbState](nextBuckets(sizes[i-1], sh.final), sh.final, sh.most).nb
		if sizes[i] != step {
			assert.Equal(t, newTable[tbState](nextBuckets(step, sh.final), sh.final, sh.most).nb, sizes[i], "step %d", i)
			continue
		}
		if sizes[i-1] < stepBuckets {
			assert.Equal(t, sizes[i-1]+1, sizes[i], "step %d: %v", i, sizes)
			continue
		}
		assert.Less(t, float64(sizes[i]), 1.7*float64(sizes[i-1]), "step %d: %v", i, sizes)
	}
	assert.GreaterOrEqual(t, sizes[len(sizes)-1], sh.final)
	assert.Less(t, sizes[len(sizes)-1], sh.final+8, "%d buckets hold 1,000 keys", sh.final)
	assert.GreaterOrEqual(t, len(sizes), 10)
	assert.Equal(t, 1000, sh.keys)
	n := 0
	for j := range sh.tab.Load().b {
		for _, sl := range sh.tab.Load().b[j].slots {
			if sl.tag&tagUsed != 0 {
				n++
			}
		}
	}
	assert.Equal(t, 1000, n)
	assert.Nil(t, sh.ev, "an eviction order before any eviction")
	for i := 0; i < 1000; i++ {
		d, err := b.AllowN(ctx, fmt.Sprint("k", i), 0)
		require.NoError(t, err)
		require.Equal(t, 10-(1+i%10), d.Remaining, "key %d", i)
	}
	assert.Equal(t, Stats{Keys: 1000, MaxKeys: 1000, DebtCapacity: debtCapacity(1000, 1)}, b.Stats())
}

// TestRestoreDominates checks what the debt memory relies on, for every
// algorithm: a state restored from its own debt owes the same debt, and at
// no time from now on does it leave more room than the state it was taken
// from (for a token bucket and a sliding counter it decides exactly as
// that state); a state restored from the debt rounded up, as the memory
// keeps it under pressure, leaves no more room either; and a state
// restored from the elementwise maximum of two debts, a shared bound,
// rounded or not, leaves no more room than either state; and a state
// restored later than its debt was taken, as an evicted key comes back,
// leaves no more room than the state brought up to then. Random
// histories give the states, at limits whose amounts the memory keeps
// exactly (5) and rounds (3,000); half the sliding logs are charged
// beyond their limit (ChargeN) and their debt taken up to a Period
// later. That caught a log's debt that kept the units it counted before
// a debt carried ahead: restored after its anchor aged out, it counted
// them where the log counts a full window of its debt.
func TestRestoreDominates(t *testing.T) {
	type probe func(now int64, n int) (allowed bool, remaining int)
	type kind struct {
		name  string
		exact bool // the restored state decides as the real one
		// run plays a random history on a fresh limiter and returns the
		// time, a probe on a copy of the state, its debt, a probe on a
		// state restored from any debt, and the capacity.
		run func(rng *rand.Rand, clk *slClock) (now int64, real probe, v debt, restored func(v debt, now int64) probe, capacity int)
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
	var kinds []kind
	later := false // restored after its debt was taken: it owes less by then
	for _, tc := range []struct {
		name string
		r    Rate
		opts []Option
	}{
		{"TokenBucket/exact", Rate{10, time.Second}, nil},
		{"TokenBucket/fraction", Rate{7, 10 * time.Second}, []Option{WithBurst(12)}},
		{"TokenBucket/interval", Rate{10, time.Minute}, []Option{WithIntervalRefill(), WithBurst(15)}},
	} {
		kinds = append(kinds, kind{tc.name, true, func(rng *rand.Rand, clk *slClock) (int64, probe, debt, func(debt, int64) probe, int) {
			b, err := NewTokenBucket(tc.r, append(tc.opts, WithClock(clk.now))...)
			require.NoError(t, err)
			now := history(rng, b, clk, tc.r.Period, b.cur.Load().burst)
			var real tbState
			b.store.inspect(t, "k", func(st *tbState, _ int64) { real = *st })
			p := func(st0 tbState) probe {
				return func(now int64, n int) (bool, int) {
					st := st0 // each probe on the state as it was
					var d Decision
					b.cur.Load().decide(&d, &st, now, n)
					return d.Allowed, d.Remaining
				}
			}
			restored := func(v debt, now int64) probe {
				var st tbState
				b.cur.Load().restore(&st, v, now)
				if !v.shared && !later {
					require.Equal(t, v, b.cur.Load().debt(&st, now), "the restored state owes its debt")
				}
				return p(st)
			}
			return now, p(real), b.cur.Load().debt(&real, now), restored, b.cur.Load().burst
		}})
	}
	for _, r := range []Rate{{5, 10 * time.Second}, {3000, 10 * time.Second}} {
		kinds = append(kinds, kind{fmt.Sprint("SlidingCounter/", r.Limit), true, func(rng *rand.Rand, clk *slClock) (int64, probe, debt, func(debt, int64) probe, int) {
			sc, err := NewSlidingCounter(r, WithClock(clk.now))
			require.NoError(t, err)
			now := history(rng, sc, clk, r.Period, r.Limit)
			var real scState
			sc.store.inspect(t, "k", func(st *scState, _ int64) { real = *st })
			p := func(st0 scState) probe {
				return func(now int64, n int) (bool, int) {
					st := st0
					var d Decision
					sc.cur.Load().decide(&d, &st, now, n)
					return d.Allowed, d.Remaining
				}
			}
			restored := func(v debt, now int64) probe {
				var st scState
				sc.cur.Load().restore(&st, v, now)
				if !v.shared && !later {
					require.Equal(t, v, sc.cur.Load().debt(&st, now), "the restored state owes its debt")
				}
				return p(st)
			}
			return now, p(real), sc.cur.Load().debt(&real, now), restored, r.Limit
		}})
		kinds = append(kinds, kind{fmt.Sprint("SlidingLog/", r.Limit), false, func(rng *rand.Rand, clk *slClock) (int64, probe, debt, func(debt, int64) probe, int) {
			l, err := NewSlidingLog(r, WithClock(clk.now))
			require.NoError(t, err)
			now := history(rng, l, clk, r.Period, r.Limit)
			if rng.Intn(2) == 0 { // carried ahead (ChargeN), over the Periods to come
				err := l.ChargeN(context.Background(), "k", 1+rng.Intn(3*r.Limit))
				require.NoError(t, err)
				// Its debt taken up to a Period later, when the log may
				// count fewer than its limit before the debt.
				now += rng.Int63n(int64(r.Period))
				clk.set(time.Duration(now))
			}
			var real slState
			l.store.inspect(t, "k", func(st *slState, _ int64) {
				real = *st
				real.ring = append([]slEntry(nil), st.ring...)
			})
			p := func(st slState) probe {
				return func(now int64, n int) (bool, int) {
					st := st
					st.ring = append([]slEntry(nil), st.ring...)
					var d Decision
					l.cur.Load().decide(&d, &st, now, n)
					return d.Allowed, d.Remaining
				}
			}
			restored := func(v debt, now int64) probe {
				var st slState
				l.cur.Load().restore(&st, v, now)
				if !v.shared && !later {
					require.Equal(t, v, l.cur.Load().debt(&st, now), "the restored state owes its debt")
				}
				return p(st)
			}
			v := l.cur.Load().debt(&slState{ring: append([]slEntry(nil), real.ring...), era: real.era, head: real.head, count: real.count, low: real.low}, now)
			return now, p(real), v, restored, r.Limit
		}})
	}
	// dominated fails if the probe sub allows, or reports more room, where
	// sup does not, at any time from now to past the end of v.
	dominated := func(t *testing.T, rng *rand.Rand, now int64, v debt, sub, sup probe, capacity int, exact bool) {
		t.Helper()
		for t0 := now; t0 <= v.at+1; t0 += 1 + rng.Int63n((v.at-now)/8+1) {
			for n := 0; n <= capacity; n += 1 + capacity/64 {
				ra, rr := sup(t0, n)
				sa, sr := sub(t0, n)
				// Remaining is compared on reports (n == 0): after an
				// allowed n > 0 it counts the units just taken.
				if sa && !ra || n == 0 && sr > rr || exact && (sa != ra || sr != rr) {
					t.Fatalf("at %d (debt %+v), n=%d: restored allowed %v remaining %d, real allowed %v remaining %d",
						t0, v, n, sa, sr, ra, rr)
				}
			}
		}
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			checked := 0
			for trial := 0; trial < 300; trial++ {
				now, real, v, restored, capacity := k.run(rng, newSlClock())
				now2, other, w, _, _ := k.run(rng, newSlClock())
				if !v.owes(now) {
					continue // fresh already: nothing would be remembered
				}
				checked++
				dominated(t, rng, now, v, restored(v, now), real, capacity, k.exact)
				// Restored later, as a key evicted at now comes back: no
				// more room than the real state brought up to then (a log
				// carrying a debt ahead, after windows of it aged out).
				at := now + rng.Int63n(v.at-now)
				later = true
				dominated(t, rng, at, v, restored(v, at), real, capacity, false)
				later = false
				// The debt rounded up, as the memory keeps it under
				// pressure, from a base up to a second old (its finest
				// ticks) or far older (coarse ones): no more room either.
				for _, age := range []int64{rng.Int63n(rebaseAfter), rng.Int63n(1 << 42)} {
					r := roundTrip(t, v, now-age)
					dominated(t, rng, now, r, restored(r, now), real, capacity, false)
				}
				// Two histories on the same timeline: their debts' maximum
				// bounds both from the later of their times, rounded too.
				if later := max(now, now2); w.owes(later) && v.owes(later) {
					m := v.max(w)
					dominated(t, rng, later, m, restored(m, later), real, capacity, false)
					dominated(t, rng, later, m, restored(m, later), other, capacity, false)
					r := roundTrip(t, m, later-rng.Int63n(1<<36))
					dominated(t, rng, later, r, restored(r, later), real, capacity, false)
					dominated(t, rng, later, r, restored(r, later), other, capacity, false)
				}
			}
			require.Greater(t, checked, 100)
		})
	}
}

// TestStoreRegrow: halfway through a growth, every tracked key is
// decided on without waiting for the growth (the test holds the shard's
// mutex). When a key finds no room in the table its shard is growing
// into (all but impossible at a grown table's load, so forced here),
// every key moves at once into a table grown a step further:
// those already moved and those not yet, each with its state, and the
// old buckets and the abandoned table send decisions on.
func TestStoreRegrow(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerHour(10), clk, WithMaxKeys(1000), WithShards(1))
	sh := &b.store.shards[0]
	for i := 0; i < 600; i++ {
		require.True(t, mustAllowN(t, b, fmt.Sprint("k", i), 1+i%10).Allowed)
	}
	byTag := map[uint64]int{}
	for i := 0; i < 600; i++ {
		h, err := b.store.hash(fmt.Sprint("k", i))
		require.NoError(t, err)
		byTag[h] = i
	}
	sh.mu.Lock()
	old := sh.tab.Load()
	half := len(old.b) / 2
	var moved, notYet []int // keys in buckets moved before the regrow, and not
	for j := range old.b {
		for _, sl := range old.b[j].slots {
			if sl.tag&tagUsed != 0 {
				i := byTag[sl.tag&^(tagMark|tagGen|tagSecond)]
				if j < half {
					moved = append(moved, i)
				} else {
					notYet = append(notYet, i)
				}
			}
		}
	}
	require.Greater(t, len(moved), 200)
	require.Greater(t, len(notYet), 200)
	tab := newTable[tbState](nextBuckets(old.nb, sh.final), sh.final, sh.most)
	tab.prev.Store(old)
	sh.tab.Store(tab)
	for j := 0; j < half; j++ { // as grow moves them
		ob := &old.b[j]
		ob.mu.Lock()
		for i := range ob.slots {
			if sl := ob.slots[i]; sl.tag&tagUsed != 0 {
				nb, k := sh.room(tab, sl.tag)
				require.GreaterOrEqual(t, k, 0)
				nb.slots[k] = sl
				if nb.slots[k].tag &^= tagSecond; nb != &tab.b[tab.first(sl.tag)] {
					nb.slots[k].tag |= tagSecond
				}
				nb.mu.Unlock()
			}
		}
		ob.slots = [bucketSlots]slot[tbState]{}
		ob.slots[0].tag = movedTag
		ob.mu.Unlock()
	}
	// Halfway through a growth, decisions find every key, moved or not,
	// without the shard's mutex (held here: the slow path would wait for
	// it, as decisions waited for a doubling's buckets to move).
	done := make(chan error)
	go func() {
		for i := 0; i < 600; i++ {
			d, err := b.AllowN(context.Background(), fmt.Sprint("k", i), 0)
			if err == nil && d.Remaining != 10-(1+i%10) {
				err = fmt.Errorf("key %d: %d remaining", i, d.Remaining)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a decision on a tracked key waited for the shard's mutex while its table grew")
	}
	old.b[half].mu.Lock()
	t2 := sh.regrow(old, half, tab)
	sh.grown(old, t2)
	sh.mu.Unlock()
	assert.Same(t, t2, sh.tab.Load())
	assert.Equal(t, newTable[tbState](nextBuckets(tab.nb, sh.final), sh.final, sh.most).nb, t2.nb)
	assert.Nil(t, tab.prev.Load(), "the old table is let go")
	for _, bs := range [][]bucket[tbState]{old.b, tab.b} {
		for j := range bs {
			require.Equal(t, uint64(movedTag), bs[j].slots[0].tag, "bucket %d sends decisions on", j)
		}
	}
	for i := 0; i < 600; i++ {
		require.Equal(t, 10-(1+i%10), mustAllowN(t, b, fmt.Sprint("k", i), 0).Remaining, "key %d", i)
	}
	assert.Equal(t, 600, b.Stats().Keys)
	n := 0
	for j := range t2.b {
		for _, sl := range t2.b[j].slots {
			if sl.tag&tagUsed != 0 {
				n++
			}
		}
	}
	assert.Equal(t, 600, n, "every key once")
}
