package floodgate

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The sliding limiters' benchmarks, with the token bucket measured in the
// same run as the baseline to compare against (absolute figures move with
// the machine's load; ratios much less).
//
//	go test -run '^$' -bench 'Sliding' -benchtime 1s .

// benchClock advances by step nanoseconds each time it is read, so that a
// benchmark can hold a steady state (every decision allowed, say) without
// sleeping. step is set before the timed loop and only read inside it.
type benchClock struct {
	start time.Time
	ns    atomic.Int64
	step  int64
}

func newBenchClock() *benchClock {
	return &benchClock{start: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
}

func (c *benchClock) now() time.Time {
	return c.start.Add(time.Duration(c.ns.Add(c.step)))
}

type benchKind struct {
	name  string
	build func(Rate, ...Option) (Limiter, error)
}

var slidingBenchKinds = []benchKind{
	{"SlidingLog", func(r Rate, opts ...Option) (Limiter, error) { return NewSlidingLog(r, opts...) }},
	{"SlidingCounter", func(r Rate, opts ...Option) (Limiter, error) { return NewSlidingCounter(r, opts...) }},
	{"TokenBucket", func(r Rate, opts ...Option) (Limiter, error) { return NewTokenBucket(r, opts...) }},
}

func mustBenchLimiter(b *testing.B, k benchKind, r Rate, opts ...Option) Limiter {
	b.Helper()
	l, err := k.build(r, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// reportAllowedShare reports the share of decisions that were allowed, so
// that a figure can be read as the allowed or the denied path.
func reportAllowedShare(b *testing.B, allowed int64) {
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}

// BenchmarkSlidingHotKey: one key, every decision allowed (the clock moves
// on by Period/Limit per decision, so one event ages out each time and the
// log is full) or every decision denied (a frozen clock on a full window).
func BenchmarkSlidingHotKey(b *testing.B) {
	r := Rate{Limit: 100, Period: time.Minute}
	ctx := context.Background()
	for _, k := range slidingBenchKinds {
		for _, path := range []struct {
			name string
			step int64
		}{{"allowed", int64(r.Period) / int64(r.Limit)}, {"denied", 0}} {
			b.Run(k.name+"/"+path.name, func(b *testing.B) {
				clk := newBenchClock()
				l := mustBenchLimiter(b, k, r, WithClock(clk.now))
				if _, err := l.AllowN(ctx, "hot", r.Limit); err != nil {
					b.Fatal(err)
				}
				clk.step = path.step
				b.ReportAllocs()
				b.ResetTimer()
				var allowed int64
				for i := 0; i < b.N; i++ {
					d, err := l.AllowN(ctx, "hot", 1)
					if err != nil {
						b.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
				}
				reportAllowedShare(b, allowed)
			})
		}
	}
}

// BenchmarkSliding100kKeys populates 100,000 keys, each with a full
// window, reports the heap bytes retained per key, then measures decisions
// on those keys in a shuffled round-robin, serially and in parallel. The
// clock moves on by Period/(Limit·keys) per decision, so that between two
// visits of a key one of its events ages out (a sliding log is populated
// with its events spread over a period, one a Period/Limit) and one unit
// comes back: the decisions are mostly allowed, on full state, spread over
// the whole store.
func BenchmarkSliding100kKeys(b *testing.B) {
	const keys = 100_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	rand.New(rand.NewSource(1)).Shuffle(keys, func(i, j int) { names[i], names[j] = names[j], names[i] })
	for _, k := range slidingBenchKinds {
		limits := []int{100}
		if k.name == "SlidingLog" {
			limits = []int{5, 100}
		}
		for _, limit := range limits {
			r := Rate{Limit: limit, Period: time.Minute}
			// Populating takes seconds: do it once for both modes and every
			// b.N, and carry the round-robin position over.
			var (
				l      Limiter
				perKey float64
				cursor atomic.Int64
			)
			setup := func(b *testing.B) {
				if l != nil {
					return
				}
				clk := newBenchClock()
				l = mustBenchLimiter(b, k, r, WithClock(clk.now))
				perKey = populateWindows(b, l, clk, names, r, k.name == "SlidingLog")
				clk.step = int64(r.Period) / int64(limit*keys)
			}
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(fmt.Sprintf("%s/limit=%d/%s", k.name, limit, mode), func(b *testing.B) {
					setup(b)
					ctx := context.Background()
					b.ReportAllocs()
					b.ResetTimer()
					var allowed atomic.Int64
					decide := func() bool {
						i := cursor.Add(1)
						d, err := l.AllowN(ctx, names[i%keys], 1)
						if err != nil {
							b.Error(err)
						}
						return d.Allowed
					}
					if mode == "serial" {
						var n int64
						for i := 0; i < b.N; i++ {
							if decide() {
								n++
							}
						}
						allowed.Store(n)
					} else {
						b.RunParallel(func(pb *testing.PB) {
							var n int64
							for pb.Next() {
								if decide() {
									n++
								}
							}
							allowed.Add(n)
						})
					}
					b.StopTimer()
					reportAllowedShare(b, allowed.Load())
					b.ReportMetric(perKey, "B/key")
					if st := l.(interface{ Stats() Stats }).Stats(); st.Keys != keys || st.EvictedLive != 0 {
						b.Fatalf("store after the run: %+v", st)
					}
				})
			}
		}
	}
}

// populateWindows fills every key's window and returns the heap bytes
// retained per key, measured after a collection before and after. With spread, each
// key gets its Limit events one at a time, Period/Limit apart, as a log
// would in steady traffic; otherwise all at once. It leaves the clock at
// one period after the first events, where they start to age out.
func populateWindows(b *testing.B, l Limiter, clk *benchClock, names []string, r Rate, spread bool) float64 {
	b.Helper()
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rounds, n := 1, r.Limit
	if spread {
		rounds, n = r.Limit, 1
	}
	for j := 0; j < rounds; j++ {
		clk.ns.Store(int64(j) * int64(r.Period) / int64(r.Limit))
		for _, name := range names {
			if d, err := l.AllowN(ctx, name, n); err != nil || !d.Allowed {
				b.Fatalf("populating %s: %+v, %v", name, d, err)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	clk.ns.Store(int64(r.Period))
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(names))
}

// BenchmarkBytesPerKey reports the heap retained per tracked key by each
// limiter, for the figures their docs state: 10,000 keys that made one
// decision each, and for the sliding log the worst case, every key
// holding Limit entries (Limit decisions of one unit at distinct times;
// 1,000 keys at Limit 1,000, to keep the run short).
//
//	go test -run '^$' -bench BytesPerKey -benchtime 3x .
func BenchmarkBytesPerKey(b *testing.B) {
	cases := []struct {
		kind    benchKind
		limit   int
		entries int // decisions per key, each at its own time
		keys    int
	}{
		{slidingBenchKinds[2], 100, 1, 10_000},
		{slidingBenchKinds[1], 100, 1, 10_000},
		{slidingBenchKinds[0], 100, 1, 10_000},
		{slidingBenchKinds[0], 100, 100, 10_000},
		{slidingBenchKinds[0], 1000, 1000, 1000},
	}
	for _, c := range cases {
		keys := c.keys
		names := make([]string, keys)
		for i := range names {
			names[i] = "client-" + strconv.Itoa(i)
		}
		b.Run(fmt.Sprintf("%s/limit=%d/decisions=%d", c.kind.name, c.limit, c.entries), func(b *testing.B) {
			r := Rate{Limit: c.limit, Period: time.Hour}
			var total float64
			for i := 0; i < b.N; i++ {
				clk := newBenchClock()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l := mustBenchLimiter(b, c.kind, r, WithClock(clk.now))
				ctx := context.Background()
				for j := 0; j < c.entries; j++ {
					clk.ns.Store(int64(j) * int64(time.Millisecond))
					for _, name := range names {
						if d, err := l.AllowN(ctx, name, 1); err != nil || !d.Allowed {
							b.Fatalf("%s: %+v, %v", name, d, err)
						}
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				total += float64(after.HeapAlloc-before.HeapAlloc) / float64(keys)
				runtime.KeepAlive(l)
			}
			b.ReportMetric(total/float64(b.N), "B/key")
		})
	}
}

// BenchmarkSlidingLogDebt: what a live eviction pays a sliding log for
// its debt (the store takes the debt of every key an eviction examines),
// for logs of 1 to 10,000 entries, each entry at its own time and all of
// them counting. Its cost is bounded whatever the log holds (see
// SlidingLog.bestStep).
//
//	go test -run '^$' -bench SlidingLogDebt .
func BenchmarkSlidingLogDebt(b *testing.B) {
	for _, entries := range []int{1, 2, 9, 100, 10_000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			r := Rate{Limit: max(entries, 5), Period: time.Hour}
			clk := newBenchClock()
			l, err := NewSlidingLog(r, WithClock(clk.now))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < entries; i++ {
				clk.ns.Store(int64(i) * int64(time.Millisecond))
				if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					b.Fatalf("entry %d: %+v, %v", i, d, err)
				}
			}
			var st *slState
			l.store.inspect(b, "k", func(s *slState, _ int64) { st = s })
			now := clk.ns.Load()
			b.ReportAllocs()
			b.ResetTimer()
			var v debt
			for i := 0; i < b.N; i++ {
				v = l.cur.Load().debt(st, now)
			}
			b.StopTimer()
			if !v.owes(now) {
				b.Fatalf("the log owes nothing: %+v", v)
			}
		})
	}
}

// BenchmarkSlidingNewKeys: the key spray on the window limiters. A full
// 100,000-key store whose keys each spent 5 of their 10 an hour at five
// times, and every request a key it has never seen: each one evicts a
// live key, taking the debt of every key it examines.
func BenchmarkSlidingNewKeys(b *testing.B) {
	const keys = 100_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "client-" + strconv.Itoa(i)
	}
	fresh := make([]string, 4*keys)
	for i := range fresh {
		fresh[i] = fmt.Sprintf("2001:db8::%x", i)
	}
	r := Rate{Limit: 10, Period: time.Hour}
	for _, k := range slidingBenchKinds[:2] {
		b.Run(k.name, func(b *testing.B) {
			clk := newBenchClock()
			l := mustBenchLimiter(b, k, r, WithClock(clk.now), WithMaxKeys(keys))
			ctx := context.Background()
			for j := 0; j < 5; j++ {
				clk.ns.Store(int64(j) * int64(time.Minute))
				for _, name := range names {
					if d, err := l.AllowN(ctx, name, 1); err != nil || !d.Allowed {
						b.Fatalf("populating %s: %+v, %v", name, d, err)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, _ = l.AllowN(ctx, fresh[i%len(fresh)], 1)
			}
			b.StopTimer()
			st := l.(interface{ Stats() Stats }).Stats()
			b.ReportMetric(float64(st.EvictedLive)/float64(b.N), "live-evictions/op")
		})
	}
}
