package floodgate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// sprayKeys is how many distinct client addresses each spray of
// TestKeySpray sends, and its store's bound: the issue's ten million into
// 100,000 keys (fullSize), else ten times the bound on an eighth of that
// store.
func sprayKeys() (n, maxKeys int) {
	maxKeys = sprayStoreKeys(100_000)
	if fullSize() {
		return 100 * maxKeys, maxKeys
	}
	return 10 * maxKeys, maxKeys
}

// sprayBytesPerKey is the heap bound the spray holds the store to, per
// tracked key, besides its debt memory (8 B a word of Stats().DebtCapacity,
// allocated once the store evicts live keys): the documented cost of a
// tracked token bucket, about 50 B, with generous headroom. Exceeding it
// means the bound on keys is not a bound on memory.
const sprayBytesPerKey = 100

// A spray of distinct client keys against a bounded store: memory stays
// within the bound, a client that is currently limited keeps its state
// while idle entries remain to be evicted, and evictions of live entries
// are counted (their debts are remembered: TestSprayDoesNotFreeLimitedClients
// checks that). Run the full ten million with
//
//	FLOODGATE_FULL=1 go test -run TestKeySpray -v .
func TestKeySpray(t *testing.T) {
	n, maxKeys := sprayKeys()
	// With a clock step of 20 s / maxKeys (200 µs for 100,000 keys), a
	// spray key's single token (8.64 s at this rate) is back long before
	// the key reaches the end of its shard's LRU (20 s on average, and the
	// shards of a small store fill unevenly), so it is idle when evicted.
	idleStep := 20 * time.Second / time.Duration(maxKeys)
	cases := []struct {
		name string
		addr func(r *rand.Rand, i int) netip.Addr
		// step is how far the clock moves per request: idleStep, or 0 for
		// a spray at one instant, in which every entry is live.
		step     time.Duration
		wantKeys int // -1: the bound
		idle     bool
	}{
		{"random IPv4, idle entries available", randomIPv4, idleStep, -1, true},
		{"random IPv6 /64s, every entry live", randomIPv6, 0, -1, false},
		{"one IPv6 /64", oneIPv6Slash64, idleStep, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { return now }
			// 10,000 per day: a victim that spent its whole burst stays
			// limited for a day, a spray key that spent one token is full
			// again after 8.64 s.
			rate := floodgate.Rate{Limit: 10_000, Period: 24 * time.Hour}
			lim, err := floodgate.NewTokenBucket(rate, floodgate.WithMaxKeys(maxKeys), floodgate.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			key, err := floodgate.KeyByIP()
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const victim = "victim"
			if d, err := lim.AllowN(ctx, victim, rate.Limit); err != nil || !d.Allowed {
				t.Fatalf("victim's burst: %+v, %v", d, err)
			}

			before := heapInUse()
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			req := &http.Request{Header: http.Header{}}
			allowed := 0
			for i := 0; i < n; i++ {
				req.RemoteAddr = netip.AddrPortFrom(tc.addr(rng, i), 443).String()
				k, err := key(req)
				if err != nil {
					t.Fatalf("key(%q): %v", req.RemoteAddr, err)
				}
				d, err := lim.Allow(ctx, k)
				if err != nil {
					t.Fatalf("Allow(%q): %v", k, err)
				}
				if d.Allowed {
					allowed++
				}
				now = now.Add(tc.step)
			}
			runtime.KeepAlive(req)
			after := heapInUse()
			st := lim.Stats()

			// The victim was never touched during the spray: it must still
			// owe exactly what it spent minus what the elapsed time gave back.
			elapsed := time.Duration(n) * tc.step
			wantRemaining := int(elapsed / (rate.Period / time.Duration(rate.Limit)))
			d, err := lim.AllowN(ctx, victim, 0)
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != wantRemaining {
				t.Errorf("victim Remaining = %d after the spray, want %d: its limit was reset", d.Remaining, wantRemaining)
			}

			wantKeys := tc.wantKeys
			if wantKeys < 0 {
				wantKeys = maxKeys
			}
			if st.Keys != wantKeys {
				t.Errorf("Keys = %d, want %d", st.Keys, wantKeys)
			}
			if tc.idle && st.EvictedLive != 0 {
				t.Errorf("EvictedLive = %d with idle entries available, want 0", st.EvictedLive)
			}
			if !tc.idle && st.EvictedLive == 0 {
				t.Errorf("EvictedLive = 0 for a spray of live entries: resets went uncounted")
			}
			if got := st.EvictedIdle + st.EvictedLive; tc.wantKeys < 0 && got != uint64(n+1-maxKeys) {
				t.Errorf("evictions = %d, want %d", got, n+1-maxKeys)
			}
			if tc.wantKeys == 2 {
				if after-before > 1<<20 {
					t.Errorf("heap grew %d B for a spray that collapses to one key", after-before)
				}
				// Every address of one /64 is one client: it gets its burst.
				if allowed != rate.Limit+int(elapsed/(rate.Period/time.Duration(rate.Limit))) {
					t.Errorf("one /64 was allowed %d times, want its quota", allowed)
				}
			}
			perKey := float64(after-before) / float64(st.Keys)
			bound := sprayBytesPerKey
			if st.EvictedLive > 0 {
				bound += 8 * st.DebtCapacity / maxKeys
			}
			if tc.wantKeys < 0 && perKey > float64(bound) {
				t.Errorf("heap grew %d B for %d keys (%.0f B/key), bound %d B/key", after-before, st.Keys, perKey, bound)
			}
			t.Logf("%d requests: keys %d, allowed %d, evicted idle %d, evicted live %d, restored %d, merged %d, heap %+.1f MiB (%.0f B/key), victim remaining %d",
				n, st.Keys, allowed, st.EvictedIdle, st.EvictedLive, st.Restored, st.Merged, float64(after-before)/(1<<20), perKey, d.Remaining)
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// randomIPv4 returns distinct, scattered addresses: multiplying by an odd
// constant is a bijection on 32 bits, so no address repeats and every
// request is a new key.
func randomIPv4(_ *rand.Rand, i int) netip.Addr {
	var b [4]byte
	v := uint32(i) * 0x9E3779B1
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return netip.AddrFrom4(b)
}

func randomIPv6(r *rand.Rand, _ int) netip.Addr {
	var b [16]byte
	hi, lo := r.Uint64(), r.Uint64()
	for i := 0; i < 8; i++ {
		b[i], b[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
	}
	b[0] = 0x20 // global unicast
	return netip.AddrFrom16(b)
}

func oneIPv6Slash64(r *rand.Rand, _ int) netip.Addr {
	b := netip.MustParseAddr("2001:db8:1:2::").As16()
	lo := r.Uint64()
	for i := 0; i < 8; i++ {
		b[8+i] = byte(lo >> (56 - 8*i))
	}
	return netip.AddrFrom16(b)
}

func Example_keySprayStats() {
	lim, _ := floodgate.NewTokenBucket(floodgate.PerMinute(10), floodgate.WithMaxKeys(2))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, _ = lim.Allow(ctx, fmt.Sprint("client-", i))
	}
	st := lim.Stats()
	fmt.Println(st.Keys, st.MaxKeys, st.EvictedIdle+st.EvictedLive)
	// Output: 2 2 1
}

// sprayStoreKeys is the store size of the spray tests: n (fullSize), or
// an eighth of it, to keep their time in bounds (the sprays are 2 and 20
// times as many keys).
func sprayStoreKeys(n int) int {
	if !fullSize() {
		return n / 8
	}
	return n
}

// sprayLimiter is what the spray tests need of every in-memory limiter.
type sprayLimiter interface {
	floodgate.Limiter
	Allow(ctx context.Context, key string) (floodgate.Decision, error)
	Stats() floodgate.Stats
}

// sprayKinds builds each in-memory limiter on a clock, with the given
// extra options.
var sprayKinds = []struct {
	name  string
	build func(r floodgate.Rate, opts ...floodgate.Option) (sprayLimiter, error)
}{
	{"TokenBucket", func(r floodgate.Rate, opts ...floodgate.Option) (sprayLimiter, error) {
		return floodgate.NewTokenBucket(r, opts...)
	}},
	{"SlidingLog", func(r floodgate.Rate, opts ...floodgate.Option) (sprayLimiter, error) {
		return floodgate.NewSlidingLog(r, opts...)
	}},
	{"SlidingCounter", func(r floodgate.Rate, opts ...floodgate.Option) (sprayLimiter, error) {
		return floodgate.NewSlidingCounter(r, opts...)
	}},
	{"IntervalTokenBucket", func(r floodgate.Rate, opts ...floodgate.Option) (sprayLimiter, error) {
		return floodgate.NewTokenBucket(r, append(opts, floodgate.WithIntervalRefill())...)
	}},
}

// spray sends count distinct keys, each spending the whole quota at once,
// moving the clock by step after each; tag keeps sprays apart.
func spray(t *testing.T, lim sprayLimiter, limit int, tag string, count int, advance func()) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < count; i++ {
		d, err := lim.AllowN(ctx, fmt.Sprintf("spray-%s-%d", tag, i), limit)
		if err != nil {
			t.Fatal(err)
		}
		_ = d // a sprayed key may start limited: its place is shared with a debt
		advance()
	}
}

// TestSprayDoesNotFreeLimitedClients is the key-spray attack: clients are
// limited, then 20 × MaxKeys distinct keys each spend their whole quota,
// so that every limited client is evicted while it still owes. None of
// them may be allowed before the RetryAfter it was given before the spray.
func TestSprayDoesNotFreeLimitedClients(t *testing.T) {
	const victims = 200
	maxKeys := sprayStoreKeys(1 << 13)
	rate := floodgate.Rate{Limit: 10, Period: time.Hour}
	for _, tc := range []struct {
		kind     int
		variant  string
		forget   bool
		extra    []floodgate.Option
		capacity int
	}{
		{kind: 0, capacity: rate.Limit},
		{kind: 1, capacity: rate.Limit},
		{kind: 2, capacity: rate.Limit},
		// A burst that is not a whole number of periods' refills.
		{kind: 0, variant: "/IntervalRefill,Burst15", extra: []floodgate.Option{floodgate.WithIntervalRefill(), floodgate.WithBurst(15)}, capacity: 15},
		{kind: 0, variant: "/WithForgetEvicted", forget: true, capacity: rate.Limit},
	} {
		k := sprayKinds[tc.kind]
		t.Run(k.name+tc.variant, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			opts := []floodgate.Option{floodgate.WithMaxKeys(maxKeys), floodgate.WithClock(func() time.Time { return now })}
			opts = append(opts, tc.extra...)
			if tc.forget {
				opts = append(opts, floodgate.WithForgetEvicted())
			}
			lim, err := k.build(rate, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			deadline := make([]time.Time, victims)
			for i := range deadline {
				v := fmt.Sprint("victim-", i)
				// Spread over time, so that the victims owe different amounts.
				if d, err := lim.AllowN(ctx, v, tc.capacity); err != nil || !d.Allowed {
					t.Fatalf("%s spending its quota: %+v, %v", v, d, err)
				}
				d, err := lim.Allow(ctx, v)
				if err != nil || d.Allowed || d.RetryAfter <= 0 {
					t.Fatalf("%s after spending its quota: %+v, %v", v, d, err)
				}
				deadline[i] = now.Add(d.RetryAfter)
				now = now.Add(time.Second)
			}

			spray(t, lim, rate.Limit, "x", 20*maxKeys, func() { now = now.Add(time.Microsecond) })
			st := lim.Stats()
			if st.EvictedLive < uint64(19*maxKeys) {
				t.Fatalf("Stats %+v: the spray did not evict live entries", st)
			}

			early := 0
			for i, dl := range deadline {
				v := fmt.Sprint("victim-", i)
				// Right after the spray, and one nanosecond before the wait
				// it was given ends (the deadlines grow with i, so the
				// clock never goes back).
				for _, at := range []time.Time{now, dl.Add(-1)} {
					if at.Before(now) {
						t.Fatalf("%s: deadline %v passed during the spray", v, dl)
					}
					now = at
					d, err := lim.Allow(ctx, v)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						early++
						if !tc.forget {
							t.Errorf("%s allowed at %v, %v before its RetryAfter", v, at, dl.Sub(at))
						}
					}
				}
			}
			switch {
			case !tc.forget && early != 0:
				t.Fatalf("%d early releases after the spray", early)
			case tc.forget && early == 0:
				// The attack this test guards against: forgetting frees them.
				t.Fatalf("no early release with WithForgetEvicted: the spray did not reach the victims")
			}
			t.Logf("after %d sprayed keys: %+v", 20*maxKeys, lim.Stats())
		})
	}
}

// TestSprayDailyReward is the reported attack: one reward a day per
// account, a 10,000-key store, and 13,000 sprayed accounts that each claim
// theirs must not give the victim a second reward the same day.
func TestSprayDailyReward(t *testing.T) {
	rate := floodgate.Rate{Limit: 1, Period: 24 * time.Hour}
	for _, k := range sprayKinds {
		t.Run(k.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			lim, err := k.build(rate, floodgate.WithMaxKeys(10_000), floodgate.WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if d, err := lim.Allow(ctx, "victim"); err != nil || !d.Allowed {
				t.Fatalf("first reward: %+v, %v", d, err)
			}
			now = now.Add(time.Minute)
			spray(t, lim, 1, "acct", 13_000, func() { now = now.Add(time.Millisecond) })
			if st := lim.Stats(); st.EvictedLive == 0 {
				t.Fatalf("Stats %+v: the spray evicted no live entry", st)
			}
			d, err := lim.Allow(ctx, "victim")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				t.Fatalf("second reward the same day after a spray: %+v, %+v", d, lim.Stats())
			}
			if want := 24*time.Hour - time.Minute - 13*time.Second; d.RetryAfter < want {
				t.Errorf("RetryAfter %v after the spray, want at least %v", d.RetryAfter, want)
			}
		})
	}
}

// TestSprayPrice measures what bounded memory costs honest clients. A
// thousand victims spend their whole quota (a sixteenth of MaxKeys in the
// small store of -short); then a spray of m × MaxKeys
// distinct keys each spends its whole quota too, at the same instant, so
// that no debt runs out meanwhile — the worst case. Afterwards it counts
//
//   - fresh keys that would be denied: 100,000 reports (n = 0, which change
//     nothing; Remaining 0 means a request would be denied) and 1,000 real
//     requests (a sixteenth of MaxKeys in the small store of -short);
//   - victims freed early: allowed although their quota is still spent.
//
// It runs m = 2, 4, 8, 16 and 32 with the default (keep every limit) and
// m = 16 and 32 with WithForgetOverflow, on every algorithm, and bounds
// the default: no debt merged (every one kept an entry of its own, exact
// or rounded up) up to m = 8, at most 0.1 % of fresh keys denied up to
// m = 4 (a fresh key whose 24-bit fingerprint meets a rounded entry's in
// its buckets starts from that debt), 1 % up to m = 8, and never a victim
// freed. The figures are logged:
//
//	go test -run TestSprayPrice -v .
func TestSprayPrice(t *testing.T) {
	maxKeys := sprayStoreKeys(1 << 14)
	rate := floodgate.Rate{Limit: 10, Period: time.Hour}
	type choice struct {
		name string
		opts []floodgate.Option
		ms   []int
	}
	choices := []choice{
		{"default", nil, []int{2, 4, 8, 16, 32}},
		{"WithForgetOverflow", []floodgate.Option{floodgate.WithForgetOverflow()}, []int{16, 32}},
	}
	for _, k := range sprayKinds {
		for _, c := range choices {
			for _, m := range c.ms {
				t.Run(fmt.Sprintf("%s/%s/m=%d", k.name, c.name, m), func(t *testing.T) {
					p := measureSprayPrice(t, k.build, rate, maxKeys, m, c.opts...)
					t.Logf("m=%2d %-18s fresh keys denied %6.3f %% of 100,000 reports, %5.1f %% of requests; victims freed %4d of %d; "+
						"debt memory %3.0f B per key of MaxKeys; %+v",
						m, c.name, 100*p.reported, 100*p.requested, p.freed, p.victims, p.debtBytes, p.stats)
					if c.opts != nil {
						// A fresh key is charged for another's debt only
						// when its 28-bit fingerprint meets a rounded
						// entry's in its two buckets: about 6 in 100
						// million on a full memory, so one report in the
						// 100,000 in about one run of 30 (6 cases).
						if p.reported > 1e-5 || p.requested != 0 {
							t.Errorf("WithForgetOverflow denied fresh keys: %.3f %% of reports, %.1f %% of requests", 100*p.reported, 100*p.requested)
						}
						return
					}
					if p.freed != 0 {
						t.Errorf("%d victims freed early: the spray bought a reset", p.freed)
					}
					if m <= 8 && p.stats.Merged != 0 {
						t.Errorf("after a %d × MaxKeys spray, %d debts lost their own entry (Merged): the default memory keeps one each up to 8 ×: %+v",
							m, p.stats.Merged, p.stats)
					}
					bound := map[int]float64{2: 0.001, 4: 0.001, 8: 0.01}[m]
					if bound > 0 && (p.reported > bound || p.requested > bound+0.005) {
						t.Errorf("after a %d × MaxKeys spray, %.3f %% of fresh keys would be denied (%.1f %% of requests), bound %.1f %%",
							m, 100*p.reported, 100*p.requested, 100*bound)
					}
				})
			}
		}
	}
}

// sprayPrice is what one spray cost.
type sprayPrice struct {
	reported, requested float64 // shares of fresh keys denied
	freed, victims      int     // victims allowed early, of victims
	debtBytes           float64 // the debt memory per key of MaxKeys
	stats               floodgate.Stats
}

func measureSprayPrice(t *testing.T, build func(floodgate.Rate, ...floodgate.Option) (sprayLimiter, error),
	rate floodgate.Rate, maxKeys, m int, opts ...floodgate.Option) sprayPrice {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	lim, err := build(rate, append(opts, floodgate.WithMaxKeys(maxKeys), floodgate.WithClock(func() time.Time { return now }))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Victims and fresh requests add debts of their own: a sixteenth of
	// MaxKeys at most, so that they add little to the spray.
	victims, requests := min(1000, maxKeys/16), min(1000, maxKeys/16)
	for i := 0; i < victims; i++ {
		if d, err := lim.AllowN(ctx, fmt.Sprint("victim-", i), rate.Limit); err != nil || !d.Allowed {
			t.Fatalf("victim %d: %+v, %v", i, d, err)
		}
	}
	spray(t, lim, rate.Limit, "x", m*maxKeys, func() {})
	var p sprayPrice
	p.stats = lim.Stats()
	p.debtBytes = float64(8*p.stats.DebtCapacity) / float64(maxKeys) // 8 B a word: BenchmarkDebtMemory
	if p.stats.EvictedLive < uint64((m-1)*maxKeys) {
		t.Fatalf("the spray evicted too few live keys: %+v", p.stats)
	}
	denied := 0
	for i := 0; i < 100_000; i++ {
		d, err := lim.AllowN(ctx, fmt.Sprint("fresh-report-", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining == 0 {
			denied++
		}
	}
	p.reported = float64(denied) / 100_000
	denied = 0
	for i := 0; i < requests; i++ {
		d, err := lim.Allow(ctx, fmt.Sprint("fresh-", i))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
	}
	p.requested = float64(denied) / float64(requests)
	p.victims = victims
	for i := 0; i < victims; i++ {
		d, err := lim.Allow(ctx, fmt.Sprint("victim-", i))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			p.freed++
		}
	}
	return p
}
