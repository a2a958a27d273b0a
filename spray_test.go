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

// sprayKeys is how many distinct client addresses each spray sends: the
// issue's ten million, or one million under the race detector or -short.
func sprayKeys() int {
	if raceEnabled || testing.Short() {
		return 1_000_000
	}
	return 10_000_000
}

// sprayBytesPerKey is the heap bound the spray holds the store to: the
// documented cost of a tracked token bucket with generous headroom for map
// growth. Exceeding it means the bound on keys is not a bound on memory.
const sprayBytesPerKey = 200

// A spray of distinct client keys against a bounded store: memory stays
// within the bound, a client that is currently limited keeps its state
// while idle entries remain to be evicted, and evictions that do reset a
// live limit are counted. Run the full ten million with
//
//	go test -run TestKeySpray -v .
func TestKeySpray(t *testing.T) {
	const maxKeys = 100_000
	cases := []struct {
		name string
		addr func(r *rand.Rand, i int) netip.Addr
		// step is how far the clock moves per request. With 100 µs, a spray
		// key's single token (8.64 s at this rate) is back before the key
		// reaches the end of the LRU, so it is idle when evicted. With 0 the
		// whole spray happens at one instant and every entry is live.
		step     time.Duration
		wantKeys int // -1: the bound
		idle     bool
	}{
		{"random IPv4, idle entries available", randomIPv4, 100 * time.Microsecond, -1, true},
		{"random IPv6 /64s, every entry live", randomIPv6, 0, -1, false},
		{"one IPv6 /64", oneIPv6Slash64, 100 * time.Microsecond, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := sprayKeys()
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
			if tc.wantKeys < 0 && perKey > sprayBytesPerKey {
				t.Errorf("heap grew %d B for %d keys (%.0f B/key), bound %d B/key", after-before, st.Keys, perKey, sprayBytesPerKey)
			}
			t.Logf("%d requests: keys %d, allowed %d, evicted idle %d, evicted live (limit reset) %d, heap %+.1f MiB (%.0f B/key), victim remaining %d",
				n, st.Keys, allowed, st.EvictedIdle, st.EvictedLive, float64(after-before)/(1<<20), perKey, d.Remaining)
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
