package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// BenchmarkLeaseHotKey is the cost of a decision on a hot key in lease
// mode: nearly all are answered from the lease in memory, a round trip
// now and then takes the next one. The rate (16.7 million per second per
// key) is never reached, so every decision is allowed; serial and from
// GOMAXPROCS goroutines. server-µs/trip is the server's script time per
// round trip (INFO commandstats), on a server of the benchmark's own.
func BenchmarkLeaseHotKey(b *testing.B) {
	addr := redistest.Start(b).Addr
	rate := floodgate.Rate{Limit: 1 << 24, Period: time.Second}
	for _, c := range leaseClients(b, addr) {
		for _, a := range leaseAlgos {
			l, err := a.redis(c.s, rate, redisstore.WithPrefix(prefix(b)), redisstore.WithTimeout(10*time.Second),
				redisstore.WithLease(redisstore.Lease{}))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.Run(c.name+"/"+a.name+"/serial", func(b *testing.B) {
				resetStats(b, addr)
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if d, err := l.AllowN(ctx, "hot", 1); err != nil || !d.Allowed {
						b.Fatalf("%+v, %v", d, err)
					}
				}
				reportTrips(b, addr)
			})
			b.Run(c.name+"/"+a.name+"/parallel", func(b *testing.B) {
				resetStats(b, addr)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if d, err := l.AllowN(ctx, "hot", 1); err != nil || !d.Allowed {
							b.Errorf("%+v, %v", d, err)
							return
						}
					}
				})
				reportTrips(b, addr)
			})
			s := l.LeaseStats()
			b.Logf("%s/%s: %+v", c.name, a.name, s)
		}
	}
}

// BenchmarkLeaseTableMemory reports the heap the lease table keeps per
// client key: 20,000 keys decided once each (a round trip each, which
// creates the key's entry), and for the counter 20 times each, which
// leases and starts the key's timer (the server's clock), measured after
// a GC before and after.
func BenchmarkLeaseTableMemory(b *testing.B) {
	addr := redistest.Shared(b)
	c := leaseGoRedis(b, addr)
	const keys = 20_000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("203.0.%d.%d", i/256, i%256)
	}
	for _, tc := range []struct {
		name  string
		a     leaseAlgo
		calls int // decisions per key: 1 creates its entry, 20 lease
	}{{"TokenBucket/once", leaseAlgos[0], 1}, {"SlidingCounter/once", leaseAlgos[1], 1}, {"SlidingCounter/leasing", leaseAlgos[1], 20}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				l, err := tc.a.redis(c.s, floodgate.PerMinute(1<<20), redisstore.WithPrefix(prefix(b)),
					redisstore.WithTimeout(10*time.Second), redisstore.WithLease(redisstore.Lease{MaxKeys: 2 * keys}))
				if err != nil {
					b.Fatal(err)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				var wg sync.WaitGroup
				for g := 0; g < 16; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := g; j < keys; j += 16 {
							for range tc.calls {
								// A copy, as a request's key would be.
								if _, err := l.AllowN(context.Background(), strings.Clone(names[j]), 1); err != nil {
									b.Error(err)
									return
								}
							}
						}
					}()
				}
				wg.Wait()
				runtime.GC()
				runtime.ReadMemStats(&after)
				s := l.LeaseStats()
				if s.Keys != keys || (tc.calls > 1 && s.Leases == 0) {
					b.Fatalf("%d keys in the table, want %d; %+v", s.Keys, keys, s)
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
				runtime.KeepAlive(l)
			}
		})
	}
}

// resetStats resets the server's command statistics.
func resetStats(b *testing.B, addr string) {
	b.Helper()
	if _, err := redistest.Do(addr, "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
}

// reportTrips reports the server's script time per script call since the
// last resetStats.
func reportTrips(b *testing.B, addr string) {
	b.Helper()
	if us, calls := scriptMicros(b, addr); calls > 0 {
		b.ReportMetric(us/calls, "server-µs/trip")
	}
}
