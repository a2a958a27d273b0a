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

	// Only live entries now, all equally costly to drop: the least
	// recently used one goes (victim was just used).
	require.True(t, allow("spray-7", 1).Allowed)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, DebtCapacity: debtCapacity(8, 1), EvictedIdle: 7, EvictedLive: 1}, b.Stats())
	// spray-0 was dropped, but its debt was remembered: it comes back as
	// limited as it left.
	d = allow("spray-0", 1)
	assert.False(t, d.Allowed, "a live eviction must not reset the limit")
	assert.Equal(t, time.Minute, d.RetryAfter)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, DebtCapacity: debtCapacity(8, 1), EvictedIdle: 7, EvictedLive: 2, Restored: 1}, b.Stats())
	// The second live eviction probed victim (fresh at +1m59s) among the
	// sprays (fresh at +2m): the smallest loss went, and came back.
	d = allow("victim", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 59*time.Second, d.RetryAfter)
	assert.Equal(t, Stats{Keys: 8, MaxKeys: 8, DebtCapacity: debtCapacity(8, 1), EvictedIdle: 7, EvictedLive: 3, Restored: 2}, b.Stats())
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

// debtCapacity is Stats().DebtCapacity by default for maxKeys keys in
// shards shards of equal size.
func debtCapacity(maxKeys, shards int) int {
	return shards * debtBuckets(maxKeys/shards, DefaultDebtsPerKey) * debtWays
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
	if g, i, ok := sh.locate(h); ok {
		st = &sh.pages[g][i].st
	}
	f(st, now)
}

// TestDebtsTable walks the debt memory through its cases on a table of
// two buckets (eight entries): own entries kept exactly and replaced, not
// merged; entries moved between buckets to make room; a full table
// merging the debt that ends soonest into a shared bound that binds
// strangers but not keys with entries of their own; a shield that keeps a
// key free of that bound; entries freed when they run out; and the
// forgetting variant.
func TestDebtsTable(t *testing.T) {
	keys := func(n int) []uint64 { // distinct hashes
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = uint64(i+1)*0x9e3779b97f4a7c15 | 3
		}
		return hs
	}
	owed := func(d *debts, h uint64, now int64) debt { return d.find(h, now).owed(now) }

	t.Run("exact and replaced", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(8)
		for i, h := range hs {
			d.put(h, debt{at: int64(100 + i), amt: uint32(i + 1)}, 0)
		}
		for i, h := range hs {
			assert.Equal(t, debt{at: int64(100 + i), amt: uint32(i + 1)}, owed(d, h, 0), "key %d", i)
		}
		assert.Zero(t, d.merged, "eight debts fit eight entries: they move to make room")
		d.put(hs[3], debt{at: 50, amt: 1}, 0) // a later, smaller state of the same key replaces its entry
		assert.Equal(t, debt{at: 50, amt: 1}, owed(d, hs[3], 0))
		d.put(hs[3], debt{}, 0) // owes nothing: the entry is freed
		assert.Equal(t, debt{}, owed(d, hs[3], 0))
		assert.Equal(t, debt{}, owed(d, keys(9)[8], 0), "a stranger owes nothing while nothing overflowed")
	})

	t.Run("overflow merges the soonest", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(12)
		for i, h := range hs[:8] {
			d.put(h, debt{at: int64(1000 + 100*i), amt: 5}, 0)
		}
		d.put(hs[8], debt{at: 5000, amt: 7}, 0) // no room anywhere: the soonest debts merge
		require.Positive(t, d.merged)
		assert.Equal(t, debt{at: 5000, amt: 7}, owed(d, hs[8], 0), "the newcomer ends last: it keeps an entry")
		stranger := hs[11]
		got := owed(d, stranger, 0)
		assert.True(t, got.owes(0), "a stranger of a bucket with a bound starts from it")
		assert.LessOrEqual(t, got.at, int64(1700), "the bound is the soonest debts' maximum")
		kept := 0
		for i, h := range hs[:8] {
			v := owed(d, h, 0)
			require.GreaterOrEqual(t, v.at, int64(1000+100*i), "key %d: a debt is never lowered", i)
			require.GreaterOrEqual(t, v.amt, uint32(5), "key %d", i)
			if v == (debt{at: int64(1000 + 100*i), amt: 5}) {
				kept++
			}
		}
		assert.GreaterOrEqual(t, kept, 5, "keys with entries of their own owe exactly their debt")

		// A shield frees a key from the bound, until the bound ends.
		d.put(stranger, debt{}, 0)
		assert.Equal(t, debt{}, owed(d, stranger, 0))
		// Everything ends by 5000: entries and bounds are free again.
		assert.Equal(t, debt{}, owed(d, hs[11], 5000))
		d.put(hs[9], debt{at: 9000, amt: 1}, 5000)
		assert.Equal(t, debt{at: 9000, amt: 1}, owed(d, hs[9], 5000))
	})

	// Issue 29, item 13: a reset key keeps its shield through any number
	// of debts that overflow its buckets, and no debt is forgotten to
	// keep a shield.
	t.Run("shields and debts", func(t *testing.T) {
		d := newDebts(2, false, 1)
		hs := keys(40)
		d.put(hs[0], debt{at: 10_000, amt: 5}, 0) // the memory holds a running debt
		for _, h := range hs[1:4] {
			d.reset(h, 0) // reset keys that had no entry: shielded all the same
		}
		for i, h := range hs[4:] {
			d.put(h, debt{at: int64(2000 + i), amt: 5}, 0)
		}
		require.Positive(t, d.merged)
		for i, h := range hs[1:4] {
			assert.Equal(t, debt{}, owed(d, h, 0), "reset key %d was bound again by the debts that came after", i)
			assert.Equal(t, debt{}, owed(d, h, 9_999), "reset key %d, until the last debt that was running at the reset ends", i)
		}
		for i, h := range append(hs[:1:1], hs[4:]...) {
			v := owed(d, h, 0)
			assert.True(t, v.owes(0) && v.amt >= 5, "debt %d was forgotten: %+v", i, v)
		}
		assert.Zero(t, d.forgotten)

		// A table of nothing but shields still forgets no debt: one
		// shield gives way.
		d = newDebts(2, false, 1)
		d.put(hs[0], debt{at: 10_000, amt: 5}, 0)
		for _, h := range hs[:8] {
			d.reset(h, 0)
		}
		d.put(hs[8], debt{at: 3000, amt: 2}, 0)
		v := owed(d, hs[8], 0)
		assert.True(t, v.at >= 3000 && v.amt >= 2, "a debt was dropped to keep the shields: %+v", v)
		shields := 0
		for _, b := range d.buckets {
			for _, e := range b {
				if e.marker() {
					shields++
				}
			}
		}
		assert.Equal(t, 7, shields, "one shield gives way, and only one")
		assert.Zero(t, d.forgotten)
	})

	t.Run("forget", func(t *testing.T) {
		d := newDebts(2, true, 1)
		hs := keys(10)
		for i, h := range hs[:9] {
			d.put(h, debt{at: int64(1000 + 100*i), amt: 5}, 0)
		}
		assert.Zero(t, d.merged)
		assert.Equal(t, uint64(1), d.forgotten)
		assert.Equal(t, debt{}, owed(d, hs[9], 0), "a stranger never waits")
		free := 0
		for i, h := range hs[:9] {
			switch v := owed(d, h, 0); v {
			case debt{}:
				free++
			default:
				assert.Equal(t, debt{at: int64(1000 + 100*i), amt: 5}, v, "key %d", i)
			}
		}
		assert.Equal(t, 1, free, "one debt, the soonest of its bucket, was forgotten")
	})
}

// TestStoreGroupsSplit: a shard filling up doubles its groups several
// times; every key stays findable with its state, and the count of groups
// stays within keysPerGroup keys per group of the shard's size.
func TestStoreGroupsSplit(t *testing.T) {
	clk := newTBClock()
	b := newTestBucket(t, PerHour(10), clk, WithMaxKeys(1000), WithShards(1))
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		require.True(t, mustAllowN(t, b, fmt.Sprint("k", i), 1+i%10).Allowed)
	}
	sh := &b.store.shards[0]
	assert.Equal(t, uint(7), sh.gbits, "1000 keys: 128 groups")
	assert.Equal(t, 1000, sh.keys)
	n := 0
	for g, p := range sh.pages {
		n += len(p)
		assert.Equal(t, len(p) > 0, sh.groups.Contains(uint32(g)), "group %d: in the LRU iff not empty", g)
	}
	assert.Equal(t, 1000, n)
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
// that state); and a state restored from the elementwise maximum of two
// debts, a shared bound, leaves no more room than either state. Random
// histories give the states.
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
				if !v.shared {
					require.Equal(t, v, b.cur.Load().debt(&st, now), "the restored state owes its debt")
				}
				return p(st)
			}
			return now, p(real), b.cur.Load().debt(&real, now), restored, b.cur.Load().burst
		}})
	}
	kinds = append(kinds, kind{"SlidingCounter", true, func(rng *rand.Rand, clk *slClock) (int64, probe, debt, func(debt, int64) probe, int) {
		r := Rate{5, 10 * time.Second}
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
			if !v.shared {
				require.Equal(t, v, sc.cur.Load().debt(&st, now), "the restored state owes its debt")
			}
			return p(st)
		}
		return now, p(real), sc.cur.Load().debt(&real, now), restored, r.Limit
	}})
	kinds = append(kinds, kind{"SlidingLog", false, func(rng *rand.Rand, clk *slClock) (int64, probe, debt, func(debt, int64) probe, int) {
		r := Rate{5, 10 * time.Second}
		l, err := NewSlidingLog(r, WithClock(clk.now))
		require.NoError(t, err)
		now := history(rng, l, clk, r.Period, r.Limit)
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
			if !v.shared {
				require.Equal(t, v, l.cur.Load().debt(&st, now), "the restored state owes its debt")
			}
			return p(st)
		}
		v := l.cur.Load().debt(&slState{ring: append([]slEntry(nil), real.ring...), era: real.era, head: real.head, count: real.count, low: real.low}, now)
		return now, p(real), v, restored, r.Limit
	}})
	// dominated fails if the probe sub allows, or reports more room, where
	// sup does not, at any time from now to past the end of v.
	dominated := func(t *testing.T, rng *rand.Rand, now int64, v debt, sub, sup probe, capacity int, exact bool) {
		t.Helper()
		for t0 := now; t0 <= v.at+1; t0 += 1 + rng.Int63n((v.at-now)/8+1) {
			for n := 0; n <= capacity; n++ {
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
				// Two histories on the same timeline: their debts' maximum
				// bounds both from the later of their times.
				if later := max(now, now2); w.owes(later) && v.owes(later) {
					m := v.max(w)
					dominated(t, rng, later, m, restored(m, later), real, capacity, false)
					dominated(t, rng, later, m, restored(m, later), other, capacity, false)
				}
			}
			require.Greater(t, checked, 100)
		})
	}
}
