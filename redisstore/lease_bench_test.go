package redisstore_test

import (
	"context"
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
// GOMAXPROCS goroutines.
func BenchmarkLeaseHotKey(b *testing.B) {
	addr := redistest.Shared(b)
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
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if d, err := l.AllowN(ctx, "hot", 1); err != nil || !d.Allowed {
						b.Fatalf("%+v, %v", d, err)
					}
				}
			})
			b.Run(c.name+"/"+a.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if d, err := l.AllowN(ctx, "hot", 1); err != nil || !d.Allowed {
							b.Errorf("%+v, %v", d, err)
							return
						}
					}
				})
			})
			s := l.LeaseStats()
			b.Logf("%s/%s: %+v", c.name, a.name, s)
		}
	}
}
